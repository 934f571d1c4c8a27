//! Fleet rollout simulation (bench/fleet/run.sh): N simulated agents running the
//! agent's real follow core (`rollout::follow::decide`) on real libgit2 fetches (each its own
//! bare mirror, `agent::git::Mirror`), against a local git smart-HTTP server (`git
//! http-backend` behind a counting HTTP/1.1 front), with per-host jitter; the dataplane is
//! simulated (an apply of a commit whose message has `[sim: fail]` fails on the canary wave).
//! The controller is the real decision core (`rollout::controller::decide`) and the real state
//! ref I/O (`rollout::state_ref`), fed the agents' reports directly (no Prometheus scrape delay).
//!
//! `FWC_SIM_SERVER=nginx` serves the repository with Debian's nginx and fcgiwrap in front of
//! `git http-backend` instead (a real web server stack; its processes' CPU is read from a
//! cpuacct cgroup, else /proc), `FWC_SIM_SERVER=lighttpd` with Debian's lighttpd and mod_cgi
//! (which waits for its CGIs, so that their CPU also reaches this process and `../shared/quiet`
//! when the server is stopped: `server_cpu_total_s` gives both counts), and `FWC_SIM_POLL=refs`
//! makes the agents poll the static `info/refs` that the web server serves (`fwc agent
//! --refs-url`), fetching with git only when a ref moved. The report's `nginx_*` fields are the
//! web server's, whichever it is.
//!
//! `fwc-fleet-sim HOSTS POLL_SECS` -> a report on stdout (JSON): git server requests/s, bytes/s,
//! CPU; push -> canary applied; each wave's duration; time to 100 %; canary failure -> halt
//! commit -> last agent seeing it; hosts that applied the halted commit; applies after seeing
//! the halt; memory per simulated agent.

mod agent;
mod controller;
mod measure;
mod repo;
mod server;

use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fwc_compiler::artifacts::rollout::RolloutState;
use fwc_runtime::agent::git::Mirror;
use fwc_runtime::rollout::controller::Command as Ctl;

use agent::{Agent, Shared};
use controller::{advance, step};
use measure::{children_cpu_s, rss_kib};
use repo::{git, rules};
use server::builtin::{serve_git, GitStats};
use server::Web;

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
    let mut web = Web::from_env(&root);
    let port = match &web {
        Some(n) => n.port(),
        None => serve_git(root.clone(), stats.clone()),
    };
    let url = format!("http://127.0.0.1:{port}/rules.git");
    let refs_poll = std::env::var("FWC_SIM_POLL").as_deref() == Ok("refs");
    assert!(!refs_poll || web.is_some(), "FWC_SIM_POLL=refs needs FWC_SIM_SERVER=nginx or lighttpd (the static file)");
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
    eprintln!("{hosts} agents, poll {poll:?}, {workers} workers; url {url}; server {}; refs poll {refs_poll}", web.as_ref().map_or("builtin", |n| n.name()));

    // Every agent reports (as to Prometheus) before the controller first runs.
    while sh.reports.lock().unwrap().len() < hosts {
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("{:7.1}s every agent reports", sh.t0.elapsed().as_secs_f64());
    // Scenario 1 (happy path): the rollout of c1 from nothing to 100 %.
    let all_on = |c: &str| sh.reports.lock().unwrap().values().filter(|r| r.applied.as_deref() == Some(c)).count();
    let tick = Duration::from_secs(2);
    let t_push1 = sh.t0.elapsed().as_secs_f64();
    let server = || match &web {
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
        "server_cpu_cores": if web.is_some() { (idle1.0 .0 - idle0.0 .0) / idle_s } else { (idle1.2 - idle0.2) / idle_s + (idle1.3 - idle0.3) as f64 / 1e9 / idle_s },
        "static_refs_requests_per_poll": (idle1.0 .1 - idle0.0 .1) as f64 / idle_polls,
        "smart_http_requests_per_poll": if web.is_some() { (idle1.0 .2 - idle0.0 .2) as f64 / idle_polls } else { (idle1.1 - idle0.1) as f64 / idle_polls },
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
        let not_v3: std::collections::BTreeSet<&String> = ev.iter().filter(|e| e.3 == "applied" && e.0 >= after(replayed_at) && e.0 < t4 && e.2 != c3).map(|e| &e.1).collect();
        // Moved by the replayed state: an apply made while following it (a host reverting after
        // its self-check, or coming back and applying what its wave allows, is not).
        let moved: std::collections::BTreeSet<&String> = ev.iter().filter(|e| e.3 == "applied_under_state" && e.2 == old_state).map(|e| &e.1).collect();
        let rollbacks_to: std::collections::BTreeSet<&String> = ev.iter().filter(|e| e.3 == "applied" && e.0 >= t3 && e.0 < t4 && e.2 == c1).map(|e| &e.1).collect();
        let rollbacks_v4: std::collections::BTreeSet<&String> = ev.iter().filter(|e| e.3 == "applied" && e.0 >= t4 && e.2 == c3).map(|e| &e.1).collect();
        let last_back = ev.iter().filter(|e| e.3 == "back" && e.0 >= t3 && away.contains(&e.1)).map(|e| e.0 - t3).fold(f64::NAN, f64::max);
        let restore_wait = restored_at.zip(replayed_at).map(|(r, p)| r - p).unwrap_or(0.0);
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
            "hosts_that_applied_other_than_v3_after_the_replay": not_v3.len(),
            "fleet_wide_rollbacks": ev.iter().filter(|e| e.3 == "fleet_rollback" && e.0 >= t3).count(),
            "hosts_rolled_back_during_v3": rollbacks_to.len(),
            "hosts_rolled_back_during_the_policy_drop": rollbacks_v4.len(),
            "v3_time_to_100pct_s": t3_done,
            "v3_time_to_100pct_without_the_restore_wait_s": t3_done.map(|t| t - restore_wait),
            "last_away_host_back_after_push_s": last_back,
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
    // The server stopped and waited for before the report: its whole CPU, as its cgroup counted
    // it and as it reached this process (and `../shared/quiet`) through wait.
    let stopped = web.as_mut().map(|n| n.stop());
    let report = serde_json::json!({
        "hosts": hosts,
        "poll_s": poll.as_secs_f64(),
        "wave_sizes": waves,
        "agent_polls": polls.load(Ordering::Relaxed),
        "server": web.as_ref().map_or("builtin front+git-http-backend", |n| n.name()),
        "refs_poll": refs_poll,
        "nginx_cpu_cores": (srv1.0 - srv0.0) / secs,
        "nginx_cpu_source": match &web { Some(n) if n.acct().is_some() => "cgroup cpuacct", Some(_) => "process tree (lower bound)", None => "-" },
        "server_cpu_total_s": stopped.map(|s| serde_json::json!({ "cgroup": s.cgroup_s, "waited": s.waited_s })),
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
