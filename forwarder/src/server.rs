//! The [`Forwarder`]: owns the listeners of a `forward.json` and reloads them in two steps.
//! `prepare` validates and binds new listeners (a bind conflict fails here, before anything
//! changes); `commit` starts them, updates changed rules in place and drains removed ones.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use fwc_artifacts::{ForwardArtifact, Listener, ListenerProto};
use ipnet::IpNet;
use rustix::net::{AddressFamily, SocketFlags, SocketType};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::resolve::Resolver;
use crate::shared::{Ctx, Current, ListenerHandle, Routes, RuleShared};
use crate::splice::PipePool;
use crate::stats::RuleStatsSnapshot;

pub use crate::options::{Options, DEFAULT_SNI_TIMEOUT};
pub use crate::shared::SniStats;

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


struct Active {
    /// The forwards of this socket: one, or several sharing it by `sni=` (sorted by name).
    cfg: Vec<Listener>,
    handle: Arc<ListenerHandle>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    local: SocketAddr,
}

struct Draining {
    cfg: Vec<Listener>,
    local: SocketAddr,
    handle: Arc<ListenerHandle>,
}

enum Bound {
    Tcp(OwnedFd),
    Udp(OwnedFd),
}

struct Staged {
    config: ForwardArtifact,
    bound: Vec<(ListenerKey, Vec<Listener>, Bound)>,
    /// New listeners that overlap a listener being removed: bound at commit, after it closed.
    deferred: Vec<(ListenerKey, Vec<Listener>)>,
    removed: Vec<ListenerKey>,
    changed: Vec<(ListenerKey, Vec<Listener>)>,
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
    /// Connections open on the socket (all routes of a shared socket).
    pub conns_active: u64,
    /// The TLS server name this forward is routed by, on a shared socket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sni: Option<String>,
}

/// A socket shared by several forwards with `sni=`: its routes and how connections went.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SniListenerStatus {
    pub listen_addr: String,
    pub listen_port: u16,
    pub local: Option<SocketAddr>,
    /// (server name pattern, rule), exact names first.
    pub routes: Vec<(String, String)>,
    /// The forward that takes everything else; none: unmatched connections are closed.
    pub fallback: Option<String>,
    pub routed: u64,
    pub to_fallback: u64,
    pub misses: u64,
    pub parse_failures: u64,
    pub timeouts: u64,
}

/// The live state of the forwarder.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub pid: u32,
    pub splice: bool,
    /// Uncapped TCP connections are moved by BPF sockmap redirection (loaded and active).
    #[serde(default)]
    pub sockmap: bool,
    /// The committed config.
    pub config: ForwardArtifact,
    pub listeners: Vec<ListenerStatus>,
    /// Sockets routed by TLS server name (a subset of `listeners`, one entry per socket).
    #[serde(default)]
    pub sni_listeners: Vec<SniListenerStatus>,
    /// Removed listeners whose connections are still draining.
    pub draining: Vec<ListenerStatus>,
    pub rules: Vec<RuleStatsSnapshot>,
    /// Health of the targets of forwards with a health check, by rule and target.
    #[serde(default)]
    pub health: Vec<crate::health::TargetHealth>,
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

/// The probe task of a rule with a health check, and what it probes.
/// (check, targets, kernel chains for a kernel forward, health, task).
type HealthTask = (
    fwc_artifacts::HealthCheck,
    Vec<fwc_artifacts::ForwardTarget>,
    Option<fwc_artifacts::KernelHealth>,
    Arc<crate::health::Health>,
    JoinHandle<()>,
);

/// The resolver task of a kernel forward to a DNS name: (what it serves, its health, the
/// addresses installed, task).
type DnsTask = (fwc_artifacts::KernelDns, Arc<crate::health::Health>, crate::kernel_dns::Installed, JoinHandle<()>);

struct Inner {
    ctx: Arc<Ctx>,
    health_tasks: Mutex<HashMap<String, HealthTask>>,
    dns_tasks: Mutex<BTreeMap<String, DnsTask>>,
    rules: Mutex<HashMap<String, Arc<RuleShared>>>,
    state: tokio::sync::Mutex<State>,
}

/// The forwarder. Cheap to clone; all clones drive the same listeners.
#[derive(Clone)]
pub struct Forwarder {
    inner: Arc<Inner>,
}

fn validate(cfg: &ForwardArtifact) -> Result<BTreeMap<ListenerKey, Vec<Listener>>, ReloadError> {
    let mut out: BTreeMap<ListenerKey, Vec<Listener>> = BTreeMap::new();
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
        if let Some(name) = &l.sni {
            if l.proto == ListenerProto::Udp {
                errs.push(format!("rule {:?}: sni routing is for TCP only", l.rule));
            }
            if !crate::sni::valid_pattern(name) {
                errs.push(format!("rule {:?}: sni {name:?} is not a DNS name or *.name", l.rule));
            }
        }
        out.entry(key).or_default().push(l.clone());
    }
    for (key, group) in out.iter_mut() {
        group.sort_by(|a, b| (&a.sni, &a.rule).cmp(&(&b.sni, &b.rule)));
        if group.len() > 1 {
            let mut t = crate::sni::Table::default();
            for l in group.iter() {
                if !t.insert(l.sni.as_deref(), ()) {
                    let what = match &l.sni {
                        Some(n) => format!("sni {n:?}"),
                        None => "no sni (a second fallback)".into(),
                    };
                    errs.push(format!("listener {key} appears twice: rule {:?} with {what}", l.rule));
                }
            }
        }
    }
    if errs.is_empty() {
        Ok(out)
    } else {
        Err(ReloadError::Invalid(errs.join("; ")))
    }
}

fn rule_names(g: &[Listener]) -> String {
    g.iter().map(|l| l.rule.as_str()).collect::<Vec<_>>().join(",")
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
        // Accepted sockets inherit TCP_NODELAY from the listening one (Linux copies the
        // listener's options into each child): set once here, it saves a setsockopt(2) per
        // connection on the accept path.
        rustix::net::sockopt::set_tcp_nodelay(&fd, true)?;
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
            pool: PipePool::new(opts.pipe_size, opts.pipe_max, opts.pipe_pool).hold_tails(opts.splice_more),
            sockmap: opts.sockmap.then(|| crate::sockmap::Engine::load(opts.sockmap_pairs)).and_then(|r| {
                r.map_err(|e| tracing::warn!("sockmap redirection unavailable, using splice: {e}")).ok()
            }),
            resolver: Resolver::new(),
            opts,
        });
        Forwarder {
            inner: Arc::new(Inner { ctx, health_tasks: Mutex::default(), dns_tasks: Mutex::default(), rules: Mutex::new(HashMap::new()), state: Default::default() }),
        }
    }

    pub fn options(&self) -> &Options {
        &self.inner.ctx.opts
    }

    /// Pipes created so far by the splice pool (test aid).
    pub fn pipes_created(&self) -> u64 {
        self.inner.ctx.pool.created.load(Relaxed)
    }

    /// Connections handed to the sockmap so far, and connections it did not take (they used
    /// splice); `None` without the sockmap program (test aid).
    pub fn sockmap_counts(&self) -> Option<(u64, u64)> {
        self.inner.ctx.sockmap.as_ref().map(|e| (e.linked.load(Relaxed), e.fallbacks.load(Relaxed)))
    }

    /// Pipe sizes the kernel refused so far (start sizes and grows; test aid).
    pub fn pipes_refused(&self) -> u64 {
        self.inner.ctx.pool.refused.load(Relaxed)
    }

    /// Capacities of the pipes waiting in the pool (test aid).
    pub fn pooled_pipe_sizes(&self) -> Vec<usize> {
        self.inner.ctx.pool.free_sizes()
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
                    report.changed.push(format!("{} ({key})", rule_names(l)));
                    changed.push((*key, l.clone()));
                }
                None if removed.iter().any(|r| r.overlaps(key)) => {
                    report.deferred.push(format!("{} ({key})", rule_names(l)));
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
                    report.added.push(format!("{} ({key})", rule_names(&l)));
                    bound.push((key, l, b));
                }
                Err(e) => conflicts.push(format!("{} ({key}): {e}", rule_names(&l))),
            }
        }
        if !conflicts.is_empty() {
            return Err(ReloadError::Conflicts(conflicts)); // `bound` drops: sockets closed
        }
        for k in &removed {
            report.removed.push(format!("{} ({k})", rule_names(&st.active[k].cfg)));
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
        self.sync_health(&staged.config);
        self.sync_dns(&staged.config);
        // Removed: stop accepting now, drain in the background.
        for key in &staged.removed {
            if let Some(a) = st.active.remove(key) {
                let _ = a.stop.send(true);
                let _ = a.task.await;
                self.spawn_drain(a.handle.clone());
                st.draining.push(Draining { cfg: a.cfg, local: a.local, handle: a.handle });
            }
        }
        // Changed: same socket, new settings for new connections.
        for (key, l) in staged.changed {
            if let Some(a) = st.active.get_mut(&key) {
                *a.handle.cur.write().unwrap() = Arc::new(self.routes(&l));
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
                Err(e) => errors.push(format!("{} ({key}): {e}", rule_names(&l))),
            }
        }
        for (key, l, b) in start {
            match self.start(l, b) {
                Ok(a) => {
                    st.active.insert(key, a);
                }
                Err((l, e)) => errors.push(format!("{} ({key}): {e}", rule_names(&l))),
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
        for (_, (_, _, _, _, task)) in self.inner.health_tasks.lock().unwrap().drain() {
            task.abort();
        }
        for (_, (_, _, _, task)) in std::mem::take(&mut *self.inner.dns_tasks.lock().unwrap()) {
            task.abort();
        }
    }

    /// One resolver task per kernel forward to a DNS name. A task whose forward is unchanged
    /// keeps running and installs its addresses again (the nft apply before this commit may
    /// have emptied the chain); a changed one is replaced, a removed one stopped.
    fn sync_dns(&self, cfg: &ForwardArtifact) {
        let mut tasks = self.inner.dns_tasks.lock().unwrap();
        tasks.retain(|rule, (kd, _, installed, task)| {
            let keep = cfg.kernel_dns.iter().any(|k| &k.rule == rule && k == kd);
            if keep {
                crate::kernel_dns::spawn_reinstall(kd.clone(), installed.clone());
            } else {
                task.abort();
            }
            keep
        });
        for kd in &cfg.kernel_dns {
            if tasks.contains_key(&kd.rule) {
                continue;
            }
            let health = Arc::new(crate::health::Health::default());
            let installed = crate::kernel_dns::Installed::default();
            let task = crate::kernel_dns::spawn(kd.clone(), health.clone(), self.inner.ctx.resolver.clone(), installed.clone());
            tasks.insert(kd.rule.clone(), (kd.clone(), health, installed, task));
        }
    }

    /// One probe task per rule with a health check (userspace listeners and kernel forwards);
    /// a task whose check, targets or chains changed is replaced, one whose rule lost its check
    /// (or went) is stopped and its states dropped. A kernel forward with a target down gets its
    /// dispatch chains rewritten again (an nft apply that came before this commit put every
    /// target back).
    fn sync_health(&self, cfg: &ForwardArtifact) {
        type Want = (fwc_artifacts::HealthCheck, Vec<fwc_artifacts::ForwardTarget>, Option<fwc_artifacts::KernelHealth>);
        let mut want: BTreeMap<&str, Want> = BTreeMap::new();
        for l in &cfg.listeners {
            if let Some(hc) = l.health_check {
                let e = want.entry(l.rule.as_str()).or_insert_with(|| (hc, Vec::new(), None));
                for t in &l.targets {
                    if !e.1.contains(t) {
                        e.1.push(t.clone());
                    }
                }
            }
        }
        for k in &cfg.kernel_health {
            want.insert(k.rule.as_str(), (k.health_check, k.targets.clone(), Some(k.clone())));
        }
        let mut tasks = self.inner.health_tasks.lock().unwrap();
        let rules = self.inner.rules.lock().unwrap();
        tasks.retain(|rule, (hc, targets, kernel, health, task)| {
            let keep = want.get(rule.as_str()).is_some_and(|(h, t, k)| h == hc && t == targets && k == kernel);
            if !keep {
                task.abort();
                health.clear();
            } else if let Some(k) = kernel.as_ref().filter(|_| health.any_down()) {
                crate::kernel::spawn_rewrite(k.clone(), health.clone());
            }
            keep
        });
        for (rule, (hc, targets, kernel)) in want {
            if tasks.contains_key(rule) {
                continue;
            }
            let health = match (&kernel, rules.get(rule)) {
                (Some(_), _) => Arc::new(crate::health::Health::default()),
                (None, Some(shared)) => shared.health.clone(),
                (None, None) => continue,
            };
            let on_change: Option<Box<dyn Fn() + Send + Sync>> = kernel.clone().map(|k| {
                let h = health.clone();
                Box::new(move || crate::kernel::spawn_rewrite(k.clone(), h.clone())) as Box<dyn Fn() + Send + Sync>
            });
            let task = crate::health::spawn(rule.to_string(), health.clone(), targets.clone(), hc, self.inner.ctx.resolver.clone(), on_change);
            tasks.insert(rule.to_string(), (hc, targets, kernel, health, task));
        }
    }

    pub async fn status(&self) -> Status {
        let mut st = self.inner.state.lock().await;
        st.draining.retain(|d| d.handle.active.load(Relaxed) > 0 && !*d.handle.kill.borrow());
        let socket = |cfg: &[Listener], local: SocketAddr, h: &ListenerHandle| -> Vec<ListenerStatus> {
            cfg.iter()
                .map(|l| ListenerStatus {
                    rule: l.rule.clone(),
                    proto: l.proto,
                    listen_addr: l.listen_addr.clone(),
                    listen_port: l.listen_port,
                    local,
                    conns_active: h.active.load(Relaxed),
                    sni: l.sni.clone(),
                })
                .collect()
        };
        let listeners = st.active.values().flat_map(|a| socket(&a.cfg, a.local, &a.handle)).collect();
        let sni_listeners = st
            .active
            .values()
            .filter(|a| a.handle.routes().has_names())
            .map(|a| {
                let routes = a.handle.routes();
                let c = &a.handle.sni;
                SniListenerStatus {
                    listen_addr: a.cfg[0].listen_addr.clone(),
                    listen_port: a.cfg[0].listen_port,
                    local: Some(a.local),
                    routes: routes.routes().into_iter().map(|(p, cur)| (p, cur.cfg.rule.clone())).collect(),
                    fallback: routes.fallback.as_ref().map(|c| c.cfg.rule.clone()),
                    routed: c.routed.load(Relaxed),
                    to_fallback: c.fallback.load(Relaxed),
                    misses: c.misses.load(Relaxed),
                    parse_failures: c.parse_failures.load(Relaxed),
                    timeouts: c.timeouts.load(Relaxed),
                }
            })
            .collect();
        let draining = st.draining.iter().flat_map(|d| socket(&d.cfg, d.local, &d.handle)).collect();
        let configured: BTreeSet<&str> = st.config.listeners.iter().map(|l| l.rule.as_str()).collect();
        let mut rules: Vec<RuleStatsSnapshot> = self
            .inner
            .rules
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, r)| configured.contains(n.as_str()) || r.stats.conns_active.load(Relaxed) > 0)
            .map(|(n, r)| r.snapshot(n))
            .collect();
        rules.sort_by(|a, b| a.rule.cmp(&b.rule));
        let health = {
            let tasks = self.inner.health_tasks.lock().unwrap();
            let mut names: Vec<&String> = tasks.keys().collect();
            names.sort();
            let mut v: Vec<_> = names.into_iter().flat_map(|n| tasks[n].3.snapshot(n)).collect();
            let dns = self.inner.dns_tasks.lock().unwrap();
            v.extend(dns.iter().flat_map(|(n, (_, h, _, _))| h.snapshot(n)));
            v.sort_by(|a, b| (&a.rule, &a.target).cmp(&(&b.rule, &b.target)));
            v
        };
        Status {
            health,
            pid: std::process::id(),
            splice: self.inner.ctx.opts.splice,
            sockmap: self.inner.ctx.sockmap.is_some(),
            config: st.config.clone(),
            listeners,
            sni_listeners,
            draining,
            rules,
            staged: st.staged.is_some(),
        }
    }

    /// Counters of one rule.
    pub fn stats(&self, rule: &str) -> Option<RuleStatsSnapshot> {
        self.inner.rules.lock().unwrap().get(rule).map(|r| r.snapshot(rule))
    }

    /// Addresses actually bound for a rule (useful with port 0).
    pub async fn local_addrs(&self, rule: &str) -> Vec<SocketAddr> {
        let st = self.inner.state.lock().await;
        st.active.values().filter(|a| a.cfg.iter().any(|l| l.rule == rule)).map(|a| a.local).collect()
    }

    fn rule(&self, l: &Listener) -> Arc<RuleShared> {
        self.inner.rules.lock().unwrap().entry(l.rule.clone()).or_insert_with(|| Arc::new(RuleShared::new(l))).clone()
    }

    fn current(&self, l: &Listener) -> Current {
        Current { cfg: l.clone(), rule: self.rule(l), allow: parse_allow(&l.allow_from).unwrap_or_default() }
    }

    /// The route table of a socket's forwards (validated: names distinct, one fallback at most).
    fn routes(&self, group: &[Listener]) -> Routes {
        let mut t = Routes::default();
        for l in group {
            t.insert(l.sni.as_deref(), Arc::new(self.current(l)));
        }
        t
    }

    fn start(&self, group: Vec<Listener>, b: Bound) -> Result<Active, (Vec<Listener>, io::Error)> {
        match self.start_inner(&group, b) {
            Ok((handle, stop, task, local)) => Ok(Active { cfg: group, handle, stop, task, local }),
            Err(e) => Err((group, e)),
        }
    }

    #[allow(clippy::type_complexity)]
    fn start_inner(
        &self,
        group: &[Listener],
        b: Bound,
    ) -> io::Result<(Arc<ListenerHandle>, watch::Sender<bool>, JoinHandle<()>, SocketAddr)> {
        let (kill, _) = watch::channel(false);
        let handle = Arc::new(ListenerHandle {
            cur: RwLock::new(Arc::new(self.routes(group))),
            sni: SniStats::default(),
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
        Ok((handle, stop, task, local))
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

#[cfg(test)]
mod tests {
    use super::{bind, Bound, ListenerKey};
    use fwc_artifacts::ListenerProto;

    /// The accept path does not set TCP_NODELAY on each client socket: it relies on the
    /// accepted socket inheriting it from the listener `bind` made.
    #[test]
    fn accepted_sockets_inherit_tcp_nodelay_from_the_listener() {
        let key = ListenerKey { proto: ListenerProto::Tcp, addr: [127, 0, 0, 1].into(), port: 0 };
        let Bound::Tcp(fd) = bind(&key).unwrap() else { panic!("a TCP key binds a stream socket") };
        rustix::net::listen(&fd, 8).unwrap();
        let l = std::net::TcpListener::from(fd);
        l.set_nonblocking(false).unwrap();
        let _c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (a, _) = l.accept().unwrap();
        assert!(a.nodelay().unwrap(), "an accepted socket of fwc's listener has TCP_NODELAY");
    }
}
