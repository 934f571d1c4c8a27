//! The [`Forwarder`]: owns the listeners of a `forward.json` and reloads them in two steps.
//! `prepare` validates and binds new listeners (a bind conflict fails here, before anything
//! changes); `commit` starts them, updates changed rules in place and drains removed ones.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use fwc_artifacts::{ForwardArtifact, Listener, ListenerProto};
use ipnet::IpNet;
use rustix::net::{AddressFamily, SocketFlags, SocketType};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::bucket::Bucket;
use crate::limits::Limits;
use crate::resolve::Resolver;
use crate::splice::{PipePool, DEFAULT_PIPE_SIZE};
use crate::stats::{RuleStats, RuleStatsSnapshot};

/// Process-level settings of the forwarder (not part of `forward.json`).
#[derive(Debug, Clone)]
pub struct Options {
    /// Move uncapped and capped TCP with splice(2); off = buffered copy. Default on; the
    /// environment variable `FWC_FORWARD_SPLICE=0` turns it off.
    pub splice: bool,
    /// Pipe capacity requested with F_SETPIPE_SZ (env `FWC_FORWARD_PIPE_SIZE` overrides the default).
    pub pipe_size: usize,
    /// Empty pipes kept for reuse.
    pub pipe_pool: usize,
    /// How long connections of a removed listener may run before they are cut.
    pub drain_timeout: Duration,
    /// Refresh interval of resolved DNS targets.
    pub dns_ttl: Duration,
    /// listen(2) backlog.
    pub backlog: i32,
}

impl Default for Options {
    fn default() -> Self {
        let splice = !matches!(std::env::var("FWC_FORWARD_SPLICE").as_deref(), Ok("0") | Ok("off") | Ok("false"));
        Options {
            splice,
            pipe_size: std::env::var("FWC_FORWARD_PIPE_SIZE")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(DEFAULT_PIPE_SIZE),
            pipe_pool: 256,
            drain_timeout: Duration::from_secs(30),
            dns_ttl: crate::resolve::DEFAULT_TTL,
            backlog: 4096,
        }
    }
}

/// Identity of a listening socket: a listener whose key is unchanged keeps its socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ListenerKey {
    pub proto: ListenerProto,
    pub addr: IpAddr,
    pub port: u16,
}

impl fmt::Display for ListenerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = match self.proto {
            ListenerProto::Tcp => "tcp",
            ListenerProto::Udp => "udp",
        };
        write!(f, "{p} {}", SocketAddr::new(self.addr, self.port))
    }
}

impl ListenerKey {
    pub fn of(l: &Listener) -> Result<ListenerKey, String> {
        let a = l.listen_addr.trim();
        let addr = if a.is_empty() {
            IpAddr::from([0, 0, 0, 0])
        } else {
            crate::resolve::literal(a)
                .ok_or_else(|| format!("rule {:?}: listen address {a:?} is not an IP literal", l.rule))?
        };
        Ok(ListenerKey { proto: l.proto, addr, port: l.listen_port })
    }

    /// Could both be bound at once? (Same proto and port, and one address covers the other.)
    fn overlaps(&self, o: &ListenerKey) -> bool {
        self.proto == o.proto
            && self.port == o.port
            && self.port != 0
            && (self.addr == o.addr || self.addr.is_unspecified() || o.addr.is_unspecified())
    }
}

/// Shared by every listener of one rule: counters, limits and the two caps.
#[derive(Debug)]
pub(crate) struct RuleShared {
    pub stats: Arc<RuleStats>,
    pub limits: Limits,
    pub up: Bucket,
    pub down: Bucket,
}

impl RuleShared {
    fn new(l: &Listener) -> RuleShared {
        RuleShared {
            stats: Arc::new(RuleStats::default()),
            limits: Limits::new(l.max_conns, l.conn_rate),
            up: Bucket::new(l.up_bytes_per_sec, l.burst_bytes),
            down: Bucket::new(l.down_bytes_per_sec, l.burst_bytes),
        }
    }

    /// Apply a rule's limits and caps in place.
    fn apply(&self, l: &Listener) {
        self.limits.set(l.max_conns, l.conn_rate);
        self.up.set(l.up_bytes_per_sec, l.burst_bytes);
        self.down.set(l.down_bytes_per_sec, l.burst_bytes);
    }
}

/// What new connections of a listener use; swapped as a whole on reload.
#[derive(Debug)]
pub(crate) struct Current {
    pub cfg: Listener,
    pub rule: Arc<RuleShared>,
    allow: Vec<IpNet>,
}

impl Current {
    pub fn allowed(&self, ip: IpAddr) -> bool {
        if self.allow.is_empty() {
            return true;
        }
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        self.allow.iter().any(|n| n.contains(&ip))
    }
}

/// Everything the tasks of one listening socket share.
#[derive(Debug)]
pub(crate) struct ListenerHandle {
    cur: RwLock<Arc<Current>>,
    /// Round-robin cursor over the targets.
    pub rr: AtomicUsize,
    /// Connections accepted on this socket that are still open (for draining).
    pub active: AtomicU64,
    /// Set to true to cut every connection of this listener.
    pub kill: watch::Sender<bool>,
    pub ctx: Arc<Ctx>,
}

impl ListenerHandle {
    pub fn current(&self) -> Arc<Current> {
        self.cur.read().unwrap().clone()
    }
}

/// Process-wide resources.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub pool: PipePool,
    pub resolver: Arc<Resolver>,
    pub opts: Options,
}

struct Active {
    cfg: Listener,
    handle: Arc<ListenerHandle>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    local: SocketAddr,
}

struct Draining {
    key: ListenerKey,
    rule: String,
    local: SocketAddr,
    handle: Arc<ListenerHandle>,
}

enum Bound {
    Tcp(OwnedFd),
    Udp(OwnedFd),
}

struct Staged {
    config: ForwardArtifact,
    bound: Vec<(ListenerKey, Listener, Bound)>,
    /// New listeners that overlap a listener being removed: bound at commit, after it closed.
    deferred: Vec<(ListenerKey, Listener)>,
    removed: Vec<ListenerKey>,
    changed: Vec<(ListenerKey, Listener)>,
    report: PrepareReport,
}

/// What a prepare found (and a commit did).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrepareReport {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// Same socket, new settings: applied in place.
    pub changed: Vec<String>,
    pub unchanged: usize,
    /// Added listeners that reuse the port of a removed one: bound during commit.
    pub deferred: Vec<String>,
}

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ReloadError {
    #[error("invalid forward config: {0}")]
    Invalid(String),
    #[error("cannot bind: {}", .0.join("; "))]
    Conflicts(Vec<String>),
    #[error("nothing is prepared")]
    NothingStaged,
    #[error("commit incomplete: {}", .0.join("; "))]
    Commit(Vec<String>),
}

/// One listening socket as `status` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenerStatus {
    pub rule: String,
    pub proto: ListenerProto,
    pub listen_addr: String,
    pub listen_port: u16,
    /// The address actually bound (differs from `listen_port` when it is 0).
    pub local: SocketAddr,
    pub conns_active: u64,
}

/// The live state of the forwarder.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub pid: u32,
    pub splice: bool,
    /// The committed config.
    pub config: ForwardArtifact,
    pub listeners: Vec<ListenerStatus>,
    /// Removed listeners whose connections are still draining.
    pub draining: Vec<ListenerStatus>,
    pub rules: Vec<RuleStatsSnapshot>,
    /// A prepared config waits for commit.
    pub staged: bool,
}

#[derive(Default)]
struct State {
    config: ForwardArtifact,
    active: BTreeMap<ListenerKey, Active>,
    draining: Vec<Draining>,
    staged: Option<Staged>,
}

struct Inner {
    ctx: Arc<Ctx>,
    rules: Mutex<HashMap<String, Arc<RuleShared>>>,
    state: tokio::sync::Mutex<State>,
}

/// The forwarder. Cheap to clone; all clones drive the same listeners.
#[derive(Clone)]
pub struct Forwarder {
    inner: Arc<Inner>,
}

fn validate(cfg: &ForwardArtifact) -> Result<BTreeMap<ListenerKey, Listener>, ReloadError> {
    let mut out = BTreeMap::new();
    let mut errs = Vec::new();
    for l in &cfg.listeners {
        let key = match ListenerKey::of(l) {
            Ok(k) => k,
            Err(e) => {
                errs.push(e);
                continue;
            }
        };
        if l.targets.is_empty() {
            errs.push(format!("rule {:?}: no target", l.rule));
        }
        if let Some(v) = l.proxy_protocol {
            if v != 1 && v != 2 {
                errs.push(format!("rule {:?}: PROXY protocol version {v} (1 or 2)", l.rule));
            }
        }
        if l.proxy_protocol.is_some() && l.proto == ListenerProto::Udp {
            errs.push(format!("rule {:?}: PROXY protocol is supported for TCP only", l.rule));
        }
        if let Err(e) = parse_allow(&l.allow_from) {
            errs.push(format!("rule {:?}: {e}", l.rule));
        }
        if out.insert(key, l.clone()).is_some() {
            errs.push(format!("listener {key} appears twice"));
        }
    }
    if errs.is_empty() {
        Ok(out)
    } else {
        Err(ReloadError::Invalid(errs.join("; ")))
    }
}

fn parse_allow(v: &[String]) -> Result<Vec<IpNet>, String> {
    v.iter()
        .map(|s| {
            s.parse::<IpNet>()
                .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| format!("allow-from {s:?} is not a network"))
        })
        .collect()
}

fn bind(key: &ListenerKey) -> io::Result<Bound> {
    let addr = SocketAddr::new(key.addr, key.port);
    let fam = if addr.is_ipv4() { AddressFamily::INET } else { AddressFamily::INET6 };
    let ty = match key.proto {
        ListenerProto::Tcp => SocketType::STREAM,
        ListenerProto::Udp => SocketType::DGRAM,
    };
    let fd = rustix::net::socket_with(fam, ty, SocketFlags::CLOEXEC | SocketFlags::NONBLOCK, None)?;
    if addr.is_ipv6() && key.addr.is_unspecified() {
        // `::` means dual stack, whatever net.ipv6.bindv6only says.
        rustix::net::sockopt::set_ipv6_v6only(&fd, false)?;
    }
    if key.proto == ListenerProto::Tcp {
        // Allows rebinding while old connections of the port are in TIME_WAIT; a listening
        // socket on the port still makes bind fail, which is the conflict we report.
        rustix::net::sockopt::set_socket_reuseaddr(&fd, true)?;
    }
    rustix::net::bind(&fd, &addr)?;
    Ok(match key.proto {
        ListenerProto::Tcp => Bound::Tcp(fd),
        ListenerProto::Udp => Bound::Udp(fd),
    })
}

impl Forwarder {
    pub fn new(opts: Options) -> Forwarder {
        let ctx = Arc::new(Ctx {
            pool: PipePool::new(opts.pipe_size, opts.pipe_pool),
            resolver: Resolver::new(opts.dns_ttl),
            opts,
        });
        Forwarder {
            inner: Arc::new(Inner { ctx, rules: Mutex::new(HashMap::new()), state: Default::default() }),
        }
    }

    pub fn options(&self) -> &Options {
        &self.inner.ctx.opts
    }

    /// Pipes created so far by the splice pool (test aid).
    pub fn pipes_created(&self) -> u64 {
        self.inner.ctx.pool.created.load(Relaxed)
    }

    /// Validate `next` and bind its new listeners without accepting on them. Replaces an
    /// earlier prepared config. Nothing that is live changes.
    pub async fn prepare(&self, next: ForwardArtifact) -> Result<PrepareReport, ReloadError> {
        let wanted = validate(&next)?;
        let mut st = self.inner.state.lock().await;
        st.staged = None; // drops sockets bound by an earlier prepare
        let mut report = PrepareReport::default();
        let removed: Vec<ListenerKey> = st.active.keys().filter(|k| !wanted.contains_key(k)).copied().collect();
        let mut to_bind = Vec::new();
        let mut deferred = Vec::new();
        let mut changed = Vec::new();
        for (key, l) in &wanted {
            match st.active.get(key) {
                Some(a) if a.cfg == *l => report.unchanged += 1,
                Some(_) => {
                    report.changed.push(format!("{} ({key})", l.rule));
                    changed.push((*key, l.clone()));
                }
                None if removed.iter().any(|r| r.overlaps(key)) => {
                    report.deferred.push(format!("{} ({key})", l.rule));
                    deferred.push((*key, l.clone()));
                }
                None => to_bind.push((*key, l.clone())),
            }
        }
        let mut bound = Vec::new();
        let mut conflicts = Vec::new();
        for (key, l) in to_bind {
            match bind(&key) {
                Ok(b) => {
                    report.added.push(format!("{} ({key})", l.rule));
                    bound.push((key, l, b));
                }
                Err(e) => conflicts.push(format!("{} ({key}): {e}", l.rule)),
            }
        }
        if !conflicts.is_empty() {
            return Err(ReloadError::Conflicts(conflicts)); // `bound` drops: sockets closed
        }
        for k in &removed {
            let rule = &st.active[k].cfg.rule;
            report.removed.push(format!("{rule} ({k})"));
        }
        st.staged = Some(Staged { config: next, bound, deferred, removed, changed, report: report.clone() });
        Ok(report)
    }

    /// Drop a prepared config (closing the sockets it bound).
    pub async fn abort(&self) {
        self.inner.state.lock().await.staged = None;
    }

    /// Make the prepared config live.
    pub async fn commit(&self) -> Result<PrepareReport, ReloadError> {
        let mut st = self.inner.state.lock().await;
        let staged = st.staged.take().ok_or(ReloadError::NothingStaged)?;
        let mut errors = Vec::new();

        // Rule-level settings (limits, caps) in place, before new listeners accept.
        let mut seen = BTreeSet::new();
        for l in &staged.config.listeners {
            if seen.insert(l.rule.clone()) {
                self.rule(l).apply(l);
            }
        }
        // Removed: stop accepting now, drain in the background.
        for key in &staged.removed {
            if let Some(a) = st.active.remove(key) {
                let _ = a.stop.send(true);
                let _ = a.task.await;
                self.spawn_drain(a.handle.clone());
                st.draining.push(Draining { key: *key, rule: a.cfg.rule.clone(), local: a.local, handle: a.handle });
            }
        }
        // Changed: same socket, new settings for new connections.
        for (key, l) in staged.changed {
            if let Some(a) = st.active.get_mut(&key) {
                *a.handle.cur.write().unwrap() = Arc::new(self.current(&l));
                a.cfg = l;
            }
        }
        // Added (bound in prepare) and deferred (bound now).
        let mut start = Vec::new();
        for (key, l, b) in staged.bound {
            start.push((key, l, b));
        }
        for (key, l) in staged.deferred {
            match bind(&key) {
                Ok(b) => start.push((key, l, b)),
                Err(e) => errors.push(format!("{} ({key}): {e}", l.rule)),
            }
        }
        for (key, l, b) in start {
            match self.start(&l, b) {
                Ok(a) => {
                    st.active.insert(key, a);
                }
                Err(e) => errors.push(format!("{} ({key}): {e}", l.rule)),
            }
        }
        st.draining.retain(|d| d.handle.active.load(Relaxed) > 0 && !*d.handle.kill.borrow());
        let names: Vec<(String, u16)> =
            staged.config.listeners.iter().flat_map(|l| l.targets.iter().map(|t| (t.host.clone(), t.port))).collect();
        self.inner.ctx.resolver.warm(names);
        st.config = staged.config;
        if errors.is_empty() {
            Ok(staged.report)
        } else {
            Err(ReloadError::Commit(errors))
        }
    }

    /// prepare + commit.
    pub async fn reload(&self, next: ForwardArtifact) -> Result<PrepareReport, ReloadError> {
        self.prepare(next).await?;
        self.commit().await
    }

    /// Stop every listener and cut every connection.
    pub async fn shutdown(&self) {
        let mut st = self.inner.state.lock().await;
        st.staged = None;
        let active = std::mem::take(&mut st.active);
        for (_, a) in active {
            let _ = a.stop.send(true);
            let _ = a.task.await;
            a.handle.kill.send_replace(true);
        }
        for d in st.draining.drain(..) {
            d.handle.kill.send_replace(true);
        }
        st.config = ForwardArtifact::default();
    }

    pub async fn status(&self) -> Status {
        let mut st = self.inner.state.lock().await;
        st.draining.retain(|d| d.handle.active.load(Relaxed) > 0 && !*d.handle.kill.borrow());
        let listeners = st
            .active
            .values()
            .map(|a| ListenerStatus {
                rule: a.cfg.rule.clone(),
                proto: a.cfg.proto,
                listen_addr: a.cfg.listen_addr.clone(),
                listen_port: a.cfg.listen_port,
                local: a.local,
                conns_active: a.handle.active.load(Relaxed),
            })
            .collect();
        let draining = st
            .draining
            .iter()
            .map(|d| ListenerStatus {
                rule: d.rule.clone(),
                proto: d.key.proto,
                listen_addr: d.key.addr.to_string(),
                listen_port: d.key.port,
                local: d.local,
                conns_active: d.handle.active.load(Relaxed),
            })
            .collect();
        let configured: BTreeSet<&str> = st.config.listeners.iter().map(|l| l.rule.as_str()).collect();
        let mut rules: Vec<RuleStatsSnapshot> = self
            .inner
            .rules
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, r)| configured.contains(n.as_str()) || r.stats.conns_active.load(Relaxed) > 0)
            .map(|(n, r)| r.stats.snapshot(n))
            .collect();
        rules.sort_by(|a, b| a.rule.cmp(&b.rule));
        Status {
            pid: std::process::id(),
            splice: self.inner.ctx.opts.splice,
            config: st.config.clone(),
            listeners,
            draining,
            rules,
            staged: st.staged.is_some(),
        }
    }

    /// Counters of one rule.
    pub fn stats(&self, rule: &str) -> Option<RuleStatsSnapshot> {
        self.inner.rules.lock().unwrap().get(rule).map(|r| r.stats.snapshot(rule))
    }

    /// Addresses actually bound for a rule (useful with port 0).
    pub async fn local_addrs(&self, rule: &str) -> Vec<SocketAddr> {
        let st = self.inner.state.lock().await;
        st.active.values().filter(|a| a.cfg.rule == rule).map(|a| a.local).collect()
    }

    fn rule(&self, l: &Listener) -> Arc<RuleShared> {
        self.inner.rules.lock().unwrap().entry(l.rule.clone()).or_insert_with(|| Arc::new(RuleShared::new(l))).clone()
    }

    fn current(&self, l: &Listener) -> Current {
        Current { cfg: l.clone(), rule: self.rule(l), allow: parse_allow(&l.allow_from).unwrap_or_default() }
    }

    fn start(&self, l: &Listener, b: Bound) -> io::Result<Active> {
        let (kill, _) = watch::channel(false);
        let handle = Arc::new(ListenerHandle {
            cur: RwLock::new(Arc::new(self.current(l))),
            rr: AtomicUsize::new(0),
            active: AtomicU64::new(0),
            kill,
            ctx: self.inner.ctx.clone(),
        });
        let (stop, stop_rx) = watch::channel(false);
        let (task, local) = match b {
            Bound::Tcp(fd) => {
                rustix::net::listen(&fd, self.inner.ctx.opts.backlog)?;
                let std_l = std::net::TcpListener::from(fd);
                let local = std_l.local_addr()?;
                let tl = tokio::net::TcpListener::from_std(std_l)?;
                (tokio::spawn(crate::tcp::accept_loop(tl, handle.clone(), stop_rx)), local)
            }
            Bound::Udp(fd) => {
                let std_s = std::net::UdpSocket::from(fd);
                let local = std_s.local_addr()?;
                let us = Arc::new(tokio::net::UdpSocket::from_std(std_s)?);
                (tokio::spawn(crate::udp::serve(us, handle.clone(), stop_rx)), local)
            }
        };
        Ok(Active { cfg: l.clone(), handle, stop, task, local })
    }

    fn spawn_drain(&self, h: Arc<ListenerHandle>) {
        let timeout = self.inner.ctx.opts.drain_timeout;
        tokio::spawn(async move {
            let deadline = Instant::now() + timeout;
            while h.active.load(Relaxed) > 0 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            h.kill.send_replace(true);
        });
    }
}
