//! `forward.json`: the listeners the userspace forwarder runs, with their targets and limits.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `forward.json`: the listeners the userspace forwarder runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct ForwardArtifact {
    pub version: u32,
    /// Sorted by (rule, proto, listen port).
    pub listeners: Vec<Listener>,
    /// Kernel (nftables DNAT) forwards with a health check: the forwarder probes their targets
    /// and rewrites their dispatch chains when a target's health changes (sorted by rule).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernel_health: Vec<KernelHealth>,
    /// Kernel (nftables DNAT) forwards to a DNS name: the forwarder resolves the name and
    /// installs its addresses in the forward's DNAT chain (sorted by rule).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernel_dns: Vec<KernelDns>,
}

impl ForwardArtifact {
    /// Does this config give a forwarder anything to do (listeners or kernel probes)?
    pub fn needs_forwarder(&self) -> bool {
        !self.listeners.is_empty() || !self.kernel_health.is_empty() || !self.kernel_dns.is_empty()
    }
}

/// The bounds within which the forwarder honours DNS record TTLs (shorter TTLs are re-resolved
/// after the minimum, longer ones after the maximum). Hosts-file answers count as the minimum.
pub const DNS_MIN_TTL_SECS: u64 = 5;
pub const DNS_MAX_TTL_SECS: u64 = 3600;

/// A kernel forward to a DNS name. Its DNAT rule jumps to `chain`, which the compiler leaves
/// empty (nothing is translated before the name resolves); the forwarder resolves `name`
/// (record TTLs within its bounds) and replaces the chain's one rule,
/// `meta l4proto P dnat ip[6] to ADDRS[:port]` (`numgen inc mod N map` over several
/// addresses), in one nft transaction whenever the addresses change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KernelDns {
    pub rule: String,
    /// The DNS name (lower case, as written).
    pub name: String,
    /// 4: A records, `dnat ip`; 6: AAAA records, `dnat ip6`.
    pub family: u8,
    /// The DNAT chain of `table inet fwc`.
    pub chain: String,
    /// Transport protocols forwarded.
    pub protos: Vec<ListenerProto>,
    /// The target port; none keeps the port the client connected to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
}

/// A kernel forward with `health-check`: its DNAT goes through one dispatch chain per address
/// family (`numgen inc mod N vmap { 0 : goto <target chain>, … }`); each target chain holds
/// one target's DNAT. The forwarder probes `targets` and, when one's health changes, replaces
/// the dispatch chain's one rule with one over the targets that are up (all of them when
/// every target is down), in one nft transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KernelHealth {
    pub rule: String,
    /// What is probed (the target port for the forward's first listen port), in order.
    pub targets: Vec<ForwardTarget>,
    pub health_check: HealthCheck,
    /// One per address family with targets.
    pub dispatch: Vec<KernelDispatch>,
}

/// A dispatch chain of `table inet fwc` and the target chain of each of its targets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KernelDispatch {
    pub chain: String,
    /// (index into `targets`, target chain), in target order.
    pub targets: Vec<(usize, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ListenerProto {
    Tcp,
    Udp,
}

/// One listening socket of the forwarder. A rule with a port range or `proto="both"` becomes
/// several listeners with the same `rule`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Listener {
    pub rule: String,
    pub proto: ListenerProto,
    /// Address to bind: `0.0.0.0`, `::` (dual stack) or a literal.
    pub listen_addr: String,
    pub listen_port: u16,
    /// Targets in order; connections are balanced round-robin and a failed connect tries the next.
    pub targets: Vec<ForwardTarget>,
    /// Allowed client networks (CIDR); empty = everyone.
    pub allow_from: Vec<String>,
    /// Client -> target cap in bytes/s, shared by all connections of the rule.
    pub up_bytes_per_sec: Option<u64>,
    /// Target -> client cap in bytes/s, shared by all connections of the rule.
    pub down_bytes_per_sec: Option<u64>,
    pub burst_bytes: Option<u64>,
    /// Most concurrent connections (TCP) or sessions (UDP) of this rule.
    pub max_conns: Option<u32>,
    /// Most new connections of this rule per period (token bucket: `count` per `period_secs`,
    /// bursts up to `burst`).
    pub conn_rate: Option<ConnRateLimit>,
    /// PROXY protocol version (1 or 2) sent to the target on connect.
    pub proxy_protocol: Option<u8>,
    pub idle_timeout_ms: u64,
    pub connect_timeout_ms: u64,
    /// TLS server name this listener routes (`www.example.com`, or `*.example.com` for one
    /// label). Several TCP listeners may share an address and port when each has its own
    /// name; at most one of them has none (the fallback). The forwarder reads the ClientHello
    /// to route and never decrypts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sni: Option<String>,
    /// Active health checks of the targets (`health-check="tcp"`): unhealthy targets get no
    /// new connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheck>,
    /// Per-source limits (`conn-rate-per-source=`, `max-conns-per-source=`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_source: Option<PerSourceLimit>,
}

/// Per-source admission limits of a listener: each source (an IPv4 address masked to
/// `prefix4`, an IPv6 address masked to `prefix6`) has its own new-connection bucket and
/// connection count; at most `size` sources are tracked per address family, and while that
/// many are tracked a new source is refused (fail closed) — an idle source's entry (no
/// connection, bucket full again) is dropped to make room first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PerSourceLimit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conn_rate: Option<ConnRateLimit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_conns: Option<u32>,
    pub prefix4: u8,
    pub prefix6: u8,
    pub size: u32,
}

/// A TCP connect probe of every target each `interval_ms`; a probe fails when the connect
/// does not succeed within `timeout_ms`. A target goes down after `fall` failed probes in a
/// row and comes back after `rise` good ones in a row. Targets start up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HealthCheck {
    pub interval_ms: u64,
    pub timeout_ms: u64,
    pub rise: u32,
    pub fall: u32,
}

/// Defaults of `health-check`: a probe every 5 s with a 2 s timeout, down after 3 failures,
/// back after 2 successes.
pub const DEFAULT_HEALTH_INTERVAL_MS: u64 = 5_000;
pub const DEFAULT_HEALTH_TIMEOUT_MS: u64 = 2_000;
pub const DEFAULT_HEALTH_RISE: u32 = 2;
pub const DEFAULT_HEALTH_FALL: u32 = 3;

/// A new-connection rate: `count` per `period_secs`, with bursts up to `burst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConnRateLimit {
    pub count: u32,
    pub period_secs: u32,
    pub burst: u32,
}

/// A forward target: host (IP literal or DNS name) and port.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForwardTarget {
    pub host: String,
    pub port: u16,
}

/// Default idle timeout of userspace TCP connections and UDP sessions.
pub const DEFAULT_TCP_IDLE_TIMEOUT_MS: u64 = 3_600_000;
pub const DEFAULT_UDP_IDLE_TIMEOUT_MS: u64 = 60_000;
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 5_000;
