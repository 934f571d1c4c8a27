//! The userspace forwarder backend: talks to a running forwarder (`fwc forward --state-dir
//! DIR`, or the agent's) over its control socket `DIR/forwarder.sock`.
//!
//! - **prepare**: send the new `forward.json`; the forwarder validates it and binds new
//!   listeners without accepting (a port conflict fails here). No forwarder running and
//!   userspace listeners wanted: start one (`fwc forward --state-dir DIR`, detached, in the
//!   target namespace; it adopts the applied listeners, then gets the new ones) when built
//!   [`ForwardBackend::starting`], else fail with how to start one. None wanted: nothing to do.
//! - **commit**: the forwarder starts new listeners, updates changed ones in place and drains
//!   removed ones; connections of unchanged listeners are never touched.
//! - **rollback**: drop what was prepared, or, after a commit, send the previous config.
//! - **observe**: the forwarder's active listener set and committed config against the
//!   expected `forward.json`; per-rule byte counters (`packets` is 0: the forwarder counts
//!   bytes and connections, not packets).
//!
//! Test hook: `FWC_TEST_FAIL=prepare:userspace` / `commit:userspace` fail that phase.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fwc_compiler::artifacts::{Artifacts, BackendKind, ForwardArtifact, ListenerProto};
use fwc_forwarder::control::{socket_path, Client, Request, Response};
use fwc_forwarder::Status;
use miette::{miette, Result};

use super::nft::injected_failure;
use super::{Backend, Observation, RuleCounter, SniConnections};

#[derive(Debug)]
pub struct ForwardBackend {
    pub state_dir: PathBuf,
    /// Per control request (a prepare binds sockets, a commit may bind deferred ones).
    pub timeout: Duration,
    staged: Option<ForwardArtifact>,
    committed: bool,
    /// Start a forwarder when none runs and listeners are wanted; `Some(netns)`.
    start: Option<Option<String>>,
}

/// Pid of a forwarder `fwc apply` started (`DIR/forwarder.pid`); its output goes to
/// `DIR/forwarder.log`.
pub const PID_FILE: &str = "forwarder.pid";
pub const LOG_FILE: &str = "forwarder.log";

/// Is this "nobody is listening on the control socket"?
fn not_running(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused)
}

fn how_to_start(dir: &Path) -> String {
    format!("start one with `fwc forward --state-dir {}` (e.g. as a systemd service), then apply again", dir.display())
}

impl ForwardBackend {
    pub fn new(state_dir: impl Into<PathBuf>) -> ForwardBackend {
        ForwardBackend { state_dir: state_dir.into(), timeout: Duration::from_secs(30), staged: None, committed: false, start: None }
    }

    /// A backend that starts the forwarder (inside `netns`) when none is running and listeners
    /// are wanted: a killed forwarder is healed by the next apply.
    pub fn starting(mut self, netns: Option<&str>) -> ForwardBackend {
        self.start = Some(netns.map(str::to_string));
        self
    }

    /// Start `fwc forward --state-dir DIR` detached (in `netns`) and wait until its control
    /// socket answers.
    fn start_forwarder(&self, netns: Option<&str>) -> Result<Client> {
        let exe = std::env::current_exe().map_err(|e| miette!("cannot find the fwc executable: {e}"))?;
        let mut cmd = match netns {
            // A process that lives in the namespace: `ip netns exec` also gives it the
            // namespace's sysfs and /etc/netns/NS files, as for any service run there, and is
            // what `--netns` means everywhere in fwc.
            Some(ns) => {
                let mut c = std::process::Command::new("ip");
                c.args(["netns", "exec", ns]).arg(exe);
                c
            }
            None => std::process::Command::new(exe),
        };
        cmd.arg("forward").arg("--state-dir").arg(&self.state_dir);
        let log = self.state_dir.join(LOG_FILE);
        let mut child = crate::detached::spawn(cmd, &log, "the userspace forwarder")?;
        let pid = child.id();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            match self.client() {
                Ok(c) => {
                    crate::state::write_atomic(&self.state_dir.join(PID_FILE), format!("{pid}\n").as_bytes())?;
                    eprintln!(
                        "Started the userspace forwarder (pid {pid}, log {}); run it as a service (`fwc forward --state-dir {}`) to keep it across reboots.",
                        log.display(),
                        self.state_dir.display()
                    );
                    // Reap it in the background should it exit while this process still runs.
                    std::thread::spawn(move || child.wait());
                    return Ok(c);
                }
                Err(e) if not_running(&e) && std::time::Instant::now() < deadline => {
                    if let Ok(Some(st)) = child.try_wait() {
                        return Err(miette!("the userspace forwarder exited at once ({st}); see {}", log.display()));
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(miette!("the userspace forwarder did not answer on {} within 10 s: {e}", self.sock()));
                }
            }
        }
    }

    fn client(&self) -> io::Result<Client> {
        Client::connect(&self.state_dir, self.timeout)
    }

    fn request(&self, req: &Request) -> Result<Response> {
        let mut c = self.client().map_err(|e| {
            miette!(help = how_to_start(&self.state_dir), "cannot reach the forwarder at {}: {e}", self.sock())
        })?;
        c.request(req).map_err(|e| miette!("forwarder control request failed: {e}"))
    }

    fn sock(&self) -> String {
        socket_path(&self.state_dir).display().to_string()
    }

    /// The forwarder's live status; `None` when no forwarder is running.
    pub fn status(&self) -> Result<Option<Status>> {
        match self.client() {
            Err(e) if not_running(&e) => Ok(None),
            Err(e) => Err(miette!("cannot reach the forwarder at {}: {e}", self.sock())),
            Ok(mut c) => {
                let r = c.request(&Request::Status).map_err(|e| miette!("forwarder status: {e}"))?;
                Ok(r.status)
            }
        }
    }

    fn failed(what: &str, r: Response) -> miette::Report {
        let mut msg = format!("forwarder {what} failed: {}", r.error.unwrap_or_default());
        for c in r.conflicts {
            msg.push_str(&format!("\n  - {c}"));
        }
        miette!("{msg}")
    }
}

type Key = (String, ListenerProto, String, u16);

fn keys(f: &ForwardArtifact) -> BTreeSet<Key> {
    f.listeners.iter().map(|l| (l.rule.clone(), l.proto, l.listen_addr.clone(), l.listen_port)).collect()
}

impl Backend for ForwardBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Userspace
    }

    fn prepare(&mut self, next: &Artifacts) -> Result<()> {
        self.staged = None;
        self.committed = false;
        if injected_failure("prepare", BackendKind::Userspace) {
            return Err(miette!("injected failure (FWC_TEST_FAIL=prepare:userspace)"));
        }
        let cfg = next.forward.clone();
        let mut c = match self.client() {
            Err(e) if not_running(&e) => {
                if !cfg.needs_forwarder() {
                    return Ok(()); // nothing for a forwarder to do
                }
                match self.start.clone() {
                    Some(ns) => self.start_forwarder(ns.as_deref())?,
                    None => {
                        let rules: BTreeSet<&str> =
                            cfg.listeners
                            .iter()
                            .map(|l| l.rule.as_str())
                            .chain(cfg.kernel_health.iter().map(|k| k.rule.as_str()))
                            .chain(cfg.kernel_dns.iter().map(|k| k.rule.as_str()))
                            .collect();
                        return Err(miette!(
                            help = how_to_start(&self.state_dir),
                            "{} rule(s) need the userspace forwarder ({}), but no forwarder is running at {}",
                            rules.len(),
                            rules.into_iter().collect::<Vec<_>>().join(", "),
                            self.sock()
                        ));
                    }
                }
            }
            Err(e) => return Err(miette!("cannot reach the forwarder at {}: {e}", self.sock())),
            Ok(c) => c,
        };
        let r = c.request(&Request::Prepare { config: cfg.clone() }).map_err(|e| miette!("forwarder prepare failed: {e}"))?;
        if !r.ok {
            return Err(Self::failed("prepare", r));
        }
        self.staged = Some(cfg);
        Ok(())
    }

    fn commit(&mut self) -> Result<()> {
        if self.staged.is_none() {
            return Ok(());
        }
        if injected_failure("commit", BackendKind::Userspace) {
            let _ = self.request(&Request::Abort);
            return Err(miette!("injected failure (FWC_TEST_FAIL=commit:userspace)"));
        }
        let r = self.request(&Request::Commit)?;
        // A partial commit (a deferred bind failed) changed things: roll back must restore.
        self.committed = true;
        if !r.ok {
            return Err(Self::failed("commit", r));
        }
        Ok(())
    }

    fn rollback(&mut self, previous: Option<&Artifacts>) -> Result<()> {
        let staged = self.staged.take();
        let committed = std::mem::replace(&mut self.committed, false);
        if staged.is_none() {
            return Ok(());
        }
        if !committed {
            return match self.client() {
                Err(e) if not_running(&e) => Ok(()),
                _ => self.request(&Request::Abort).map(|_| ()),
            };
        }
        let config = previous.map(|p| p.forward.clone()).unwrap_or_default();
        let r = self.request(&Request::Apply { config })?;
        if !r.ok {
            return Err(Self::failed("rollback", r));
        }
        Ok(())
    }

    fn observe(&mut self, expected: &Artifacts) -> Result<Observation> {
        let want = &expected.forward;
        let Some(st) = self.status()? else {
            let mut obs = Observation::default();
            if want.needs_forwarder() {
                obs.drift.push(format!(
                    "userspace forwarder is not running ({} listener(s), {} kernel health check(s), {} kernel DNS name(s) expected); {}",
                    want.listeners.len(),
                    want.kernel_health.len(),
                    want.kernel_dns.len(),
                    how_to_start(&self.state_dir)
                ));
            }
            return Ok(obs);
        };
        let mut drift = Vec::new();
        let live: BTreeSet<Key> = st
            .listeners
            .iter()
            .map(|l| (l.rule.clone(), l.proto, l.listen_addr.clone(), l.listen_port))
            .collect();
        let wanted = keys(want);
        let fmt = |k: &Key| format!("{} {:?} {}:{}", k.0, k.1, k.2, k.3).to_lowercase();
        for k in wanted.difference(&live) {
            drift.push(format!("forward {}: listener missing ({})", k.0, fmt(k)));
        }
        for k in live.difference(&wanted) {
            drift.push(format!("forward {}: unexpected listener ({})", k.0, fmt(k)));
        }
        if drift.is_empty() {
            for l in &want.listeners {
                let got = st.config.listeners.iter().find(|x| {
                    x.rule == l.rule && x.proto == l.proto && x.listen_addr == l.listen_addr && x.listen_port == l.listen_port
                });
                if got != Some(l) {
                    drift.push(format!("forward {}: live settings differ from forward.json", l.rule));
                }
            }
            if st.config.kernel_health != want.kernel_health {
                drift.push("kernel forward health checks: live settings differ from forward.json".into());
            }
            if st.config.kernel_dns != want.kernel_dns {
                drift.push("kernel forwards to DNS names: live settings differ from forward.json".into());
            }
            drift.dedup();
        }
        let counters = st
            .rules
            .iter()
            .map(|r| RuleCounter {
                rule: r.rule.clone(),
                kind: fwc_compiler::model::RuleKind::Forward,
                backend: BackendKind::Userspace,
                packets: 0,
                bytes: r.bytes_up + r.bytes_down,
            })
            .collect();
        let active_connections = st.rules.iter().map(|r| (r.rule.clone(), r.conns_active + r.udp_sessions_active)).collect();
        let sni = st
            .sni_listeners
            .iter()
            .flat_map(|s| {
                let listener = match s.listen_addr.parse::<std::net::IpAddr>() {
                    Ok(ip) => format!("tcp {}", std::net::SocketAddr::new(ip, s.listen_port)),
                    Err(_) => format!("tcp {}:{}", s.listen_addr, s.listen_port),
                };
                [("routed", s.routed), ("fallback", s.to_fallback), ("miss", s.misses), ("parse_failure", s.parse_failures), ("timeout", s.timeouts)]
                    .map(|(result, connections)| SniConnections { listener: listener.clone(), result, connections })
            })
            .collect();
        let target_health = st.health.iter().map(|h| (h.rule.clone(), h.target.clone(), h.up)).collect();
        let per_source = super::persource::userspace_fill(&st.rules);
        Ok(Observation { drift, counters, active_connections, sni, target_health, per_source, ..Default::default() })
    }
}
