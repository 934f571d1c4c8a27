//! What the tasks of one listening socket share with the orchestrator ([`crate::server`]):
//! the per-rule state (counters, limits, caps, health, per-source table), the forward new
//! connections use (`Current`, swapped whole on reload), a socket's routes and handle, and
//! the process-wide context. The TCP and UDP tasks read them; the server creates and swaps them.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, RwLock};

use fwc_artifacts::Listener;
use ipnet::IpNet;
use tokio::sync::watch;

use crate::bucket::Bucket;
use crate::limits::Limits;
use crate::options::Options;
use crate::resolve::Resolver;
use crate::splice::PipePool;
use crate::stats::{RuleStats, RuleStatsSnapshot};

/// Shared by every listener of one rule: counters, limits, the two caps and the round-robin
/// cursor over the targets.
#[derive(Debug)]
pub(crate) struct RuleShared {
    pub stats: Arc<RuleStats>,
    pub limits: Limits,
    pub up: Bucket,
    pub down: Bucket,
    pub rr: AtomicUsize,
    /// Health of the targets (all up unless the rule has a health check).
    pub health: Arc<crate::health::Health>,
    /// Per-source limits.
    pub per_source: Arc<crate::persource::PerSource>,
}

impl RuleShared {
    /// Is this target worth a connect? Down targets are skipped unless every target of the
    /// rule is down (then all are tried: see [`crate::health`]).
    pub fn usable(&self, targets: &[fwc_artifacts::ForwardTarget], t: &fwc_artifacts::ForwardTarget) -> bool {
        self.health.is_up(t) || targets.iter().all(|x| !self.health.is_up(x))
    }
}

impl RuleShared {
    pub(crate) fn new(l: &Listener) -> RuleShared {
        RuleShared {
            stats: Arc::new(RuleStats::default()),
            limits: Limits::new(l.max_conns, l.conn_rate),
            up: Bucket::new(l.up_bytes_per_sec, l.burst_bytes),
            down: Bucket::new(l.down_bytes_per_sec, l.burst_bytes),
            rr: AtomicUsize::new(0),
            health: Arc::default(),
            per_source: crate::persource::PerSource::new(l.per_source),
        }
    }

    /// The rule's counters with its per-source table's fill.
    pub(crate) fn snapshot(&self, rule: &str) -> RuleStatsSnapshot {
        let mut s = self.stats.snapshot(rule);
        self.per_source.report(&mut s);
        s
    }

    /// Apply a rule's limits and caps in place.
    pub(crate) fn apply(&self, l: &Listener) {
        self.limits.set(l.max_conns, l.conn_rate);
        self.per_source.set(l.per_source);
        self.up.set(l.up_bytes_per_sec, l.burst_bytes);
        self.down.set(l.down_bytes_per_sec, l.burst_bytes);
    }
}

/// What new connections of a listener use; swapped as a whole on reload.
#[derive(Debug)]
pub(crate) struct Current {
    pub cfg: Listener,
    pub rule: Arc<RuleShared>,
    pub(crate) allow: Vec<IpNet>,
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

/// The routes of one listening socket: by TLS server name when several forwards share it
/// (`sni=`), else just the fallback (the one forward of the socket).
pub(crate) type Routes = crate::sni::Table<Arc<Current>>;

/// Everything the tasks of one listening socket share.
#[derive(Debug)]
pub(crate) struct ListenerHandle {
    pub(crate) cur: RwLock<Arc<Routes>>,
    /// How connections of an SNI-routed socket were routed (cumulative while the socket lives).
    pub sni: SniStats,
    /// Connections accepted on this socket that are still open (for draining).
    pub active: AtomicU64,
    /// Set to true to cut every connection of this listener.
    pub kill: watch::Sender<bool>,
    pub ctx: Arc<Ctx>,
}

impl ListenerHandle {
    /// The routes new connections use.
    pub fn routes(&self) -> Arc<Routes> {
        self.cur.read().unwrap().clone()
    }

    /// The forward of a socket without `sni=` routes (UDP, and TCP listeners of one forward).
    pub fn fallback(&self) -> Option<Arc<Current>> {
        self.cur.read().unwrap().fallback.clone()
    }
}

/// Counters of an SNI-routed socket; per route (= per rule) counters are in [`RuleStats`].
#[derive(Debug, Default)]
pub struct SniStats {
    /// An `sni=` route matched the server name.
    pub routed: AtomicU64,
    /// No route matched (or the hello named no server): sent to the fallback forward.
    pub fallback: AtomicU64,
    /// No route matched and there is no fallback: closed.
    pub misses: AtomicU64,
    /// Not a TLS ClientHello, malformed, over the size bound, or closed before it was
    /// complete: closed.
    pub parse_failures: AtomicU64,
    /// No complete ClientHello within the peek timeout: closed.
    pub timeouts: AtomicU64,
}

/// Process-wide resources.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub pool: PipePool,
    /// The sockmap program, when `Options::sockmap` asked for it and it loaded.
    pub sockmap: Option<crate::sockmap::Engine>,
    pub resolver: Arc<Resolver>,
    pub opts: Options,
}
