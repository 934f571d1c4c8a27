//! `forward "web" listen=":8080" to="10.0.0.5:80" …`: a port forward as the model holds it,
//! with its listen address, targets, backend choice and health checks.

use std::fmt;
use std::net::IpAddr;

use serde::Serialize;

use super::quota;
use super::schedule::Schedule;
use super::span::{Span, Spanned};
use super::values::{AddrMatch, Bandwidth, EventRate, PerSource, PortRange, Selector};

/// Protocol of a forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ForwardProto {
    Tcp,
    Udp,
    Both,
}

impl ForwardProto {
    pub fn as_str(self) -> &'static str {
        match self {
            ForwardProto::Tcp => "tcp",
            ForwardProto::Udp => "udp",
            ForwardProto::Both => "both",
        }
    }
}

/// `listen=":8080"`, `listen="203.0.113.1:80"`, `listen="[2001:db8::1]:27015-27020"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Listen {
    pub addr: Option<IpAddr>,
    pub ports: PortRange,
}

/// A forward target host: an IP literal (kernel-capable) or a DNS name (userspace).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum TargetHost {
    Ip(IpAddr),
    Dns(String),
}

impl fmt::Display for TargetHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TargetHost::Ip(IpAddr::V6(a)) => write!(f, "[{a}]"),
            TargetHost::Ip(a) => write!(f, "{a}"),
            TargetHost::Dns(n) => write!(f, "{n}"),
        }
    }
}

/// One `to=` target; `ports: None` keeps the listen port (port ranges map one to one).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Target {
    pub host: TargetHost,
    pub ports: Option<PortRange>,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ports {
            Some(p) => write!(f, "{}:{p}", self.host),
            None => write!(f, "{}", self.host),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    Auto,
    Kernel,
    Userspace,
}

/// `forward "web" listen=":8080" to="10.0.0.5:80" …`
#[derive(Debug, Clone, Serialize)]
pub struct ForwardRule {
    pub name: Spanned<String>,
    pub proto: ForwardProto,
    pub listen: Spanned<Listen>,
    pub targets: Spanned<Vec<Target>>,
    pub from: Option<Spanned<AddrMatch>>,
    /// `in=`: only connections arriving on these interfaces are forwarded (kernel path).
    /// Skipped when absent (digests of other forwards).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iif: Option<Spanned<Vec<String>>>,
    /// `destinations="any"`: DNAT what arrives on `in=` whatever its destination (connections
    /// routed through this host too, as iptables' `-i eth0 -p tcp --dport 80 -j DNAT`);
    /// default `"local"`: only connections to this host's addresses. Skipped when local
    /// (digests of other forwards).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub any_destination: bool,
    /// `bandwidth=` sets both directions; `up=` (client -> target) / `down=` override it.
    pub up: Option<Spanned<Bandwidth>>,
    pub down: Option<Spanned<Bandwidth>>,
    pub burst: Option<Spanned<u64>>,
    pub max_conns: Option<Spanned<u32>>,
    pub conn_rate: Option<Spanned<EventRate>>,
    pub proxy_protocol: Option<Spanned<u8>>,
    pub idle_timeout_ms: Option<Spanned<u64>>,
    /// `sni="www.example.com"` or `sni="*.example.com"` (lower case, no trailing dot): this
    /// forward takes the TLS connections for that server name on a listen address it shares
    /// with other forwards. Skipped when absent so digests of other forwards do not change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sni: Option<Spanned<String>>,
    /// `health-check="tcp"` and its `health-interval`, `health-timeout`, `health-rise`,
    /// `health-fall` (defaults filled in). Skipped when absent (digests of other forwards).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<Spanned<HealthSpec>>,
    pub backend: Spanned<BackendChoice>,
    pub on: Option<Spanned<Selector>>,
    pub comment: Option<String>,
    #[serde(skip)]
    pub span: Span,
    /// per-source limits: `conn-rate-per-source=`, `max-conns-per-source=`, …
    /// Skipped when absent, so digests of other forwards do not change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_source: Option<PerSource>,
    /// Schedules: `during=`, `tz=`, `until=` ([`crate::features::schedule`]). Skipped when
    /// absent (digests of other forwards).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Schedule>,
    /// quota: `quota="500GB/month" quota-reset-day=1 over-quota="drop"`.
    /// Skipped when absent (digests of other forwards do not change).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota: Option<Spanned<quota::QuotaSpec>>,
}

/// Active health checks of a forward's targets: a TCP connect every `interval_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HealthSpec {
    pub interval_ms: u64,
    pub timeout_ms: u64,
    pub rise: u32,
    pub fall: u32,
}
