//! `forward "web" listen=":8080" to="10.0.0.5:80" …`: a port forward as the model holds it,
//! with its listen address, targets, backend choice and health checks.

use std::fmt;
use std::net::IpAddr;

use serde::Serialize;

use super::more::{More, Rarely};
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

/// `forward "web" listen=":8080" to="10.0.0.5:80" …`. The properties few forwards have are in
/// [`ForwardMore`] (boxed, absent when none is given), read as fields of the forward
/// (`forward.sni`) through `Deref`. Serialised (the forward's digest) as it always was.
#[derive(Debug, Clone)]
pub struct ForwardRule {
    pub name: Spanned<String>,
    pub proto: ForwardProto,
    pub listen: Spanned<Listen>,
    pub targets: Spanned<Vec<Target>>,
    pub from: Option<Spanned<AddrMatch>>,
    /// `in=`: only connections arriving on these interfaces are forwarded (kernel path).
    /// Skipped when absent (digests of other forwards).
    pub iif: Option<Spanned<Vec<String>>>,
    /// `destinations="any"`: DNAT what arrives on `in=` whatever its destination (connections
    /// routed through this host too, as iptables' `-i eth0 -p tcp --dport 80 -j DNAT`);
    /// default `"local"`: only connections to this host's addresses. Skipped when local
    /// (digests of other forwards).
    pub any_destination: bool,
    /// `bandwidth=` sets both directions; `up=` (client -> target) / `down=` override it.
    pub up: Option<Spanned<Bandwidth>>,
    pub down: Option<Spanned<Bandwidth>>,
    pub backend: Spanned<BackendChoice>,
    pub on: Option<Spanned<Selector>>,
    pub comment: Option<String>,
    pub span: Span,
    /// The rarely given properties.
    pub more: More<ForwardMore>,
}

/// The properties of a [`ForwardRule`] few forwards have.
#[derive(Debug, Clone, Default)]
pub struct ForwardMore {
    pub burst: Option<Spanned<u64>>,
    pub max_conns: Option<Spanned<u32>>,
    pub conn_rate: Option<Spanned<EventRate>>,
    pub proxy_protocol: Option<Spanned<u8>>,
    pub idle_timeout_ms: Option<Spanned<u64>>,
    /// `sni="www.example.com"` or `sni="*.example.com"` (lower case, no trailing dot): this
    /// forward takes the TLS connections for that server name on a listen address it shares
    /// with other forwards. Skipped when absent so digests of other forwards do not change.
    pub sni: Option<Spanned<String>>,
    /// `health-check="tcp"` and its `health-interval`, `health-timeout`, `health-rise`,
    /// `health-fall` (defaults filled in). Skipped when absent (digests of other forwards).
    pub health: Option<Spanned<HealthSpec>>,
    /// per-source limits: `conn-rate-per-source=`, `max-conns-per-source=`, …
    /// Skipped when absent, so digests of other forwards do not change.
    pub per_source: Option<PerSource>,
    /// Schedules: `during=`, `tz=`, `until=` ([`crate::features::schedule`]). Skipped when
    /// absent (digests of other forwards).
    pub schedule: Option<Schedule>,
    /// quota: `quota="500GB/month" quota-reset-day=1 over-quota="drop"`.
    /// Skipped when absent (digests of other forwards do not change).
    pub quota: Option<Spanned<quota::QuotaSpec>>,
}

impl Rarely for ForwardMore {
    const NONE: &'static ForwardMore = &ForwardMore {
        burst: None,
        max_conns: None,
        conn_rate: None,
        proxy_protocol: None,
        idle_timeout_ms: None,
        sni: None,
        health: None,
        per_source: None,
        schedule: None,
        quota: None,
    };

    fn is_none(&self) -> bool {
        let ForwardMore { burst, max_conns, conn_rate, proxy_protocol, idle_timeout_ms, sni, health, per_source, schedule, quota } = self;
        burst.is_none()
            && max_conns.is_none()
            && conn_rate.is_none()
            && proxy_protocol.is_none()
            && idle_timeout_ms.is_none()
            && sni.is_none()
            && health.is_none()
            && per_source.is_none()
            && schedule.is_none()
            && quota.is_none()
    }
}

impl std::ops::Deref for ForwardRule {
    type Target = ForwardMore;
    fn deref(&self) -> &ForwardMore {
        self.more.get()
    }
}

/// Setting a rarely given property boxes them.
impl std::ops::DerefMut for ForwardRule {
    fn deref_mut(&mut self) -> &mut ForwardMore {
        self.more.get_mut()
    }
}

/// The fields in the order, and with the skips, of the forward's digest since it exists.
impl Serialize for ForwardRule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use super::more::field_if_some;
        use serde::ser::SerializeStruct;
        let m: &ForwardMore = self;
        let mut st = s.serialize_struct("ForwardRule", 23)?;
        st.serialize_field("name", &self.name)?;
        st.serialize_field("proto", &self.proto)?;
        st.serialize_field("listen", &self.listen)?;
        st.serialize_field("targets", &self.targets)?;
        st.serialize_field("from", &self.from)?;
        field_if_some(&mut st, "iif", &self.iif)?;
        if self.any_destination {
            st.serialize_field("any_destination", &true)?;
        } else {
            st.skip_field("any_destination")?;
        }
        st.serialize_field("up", &self.up)?;
        st.serialize_field("down", &self.down)?;
        st.serialize_field("burst", &m.burst)?;
        st.serialize_field("max_conns", &m.max_conns)?;
        st.serialize_field("conn_rate", &m.conn_rate)?;
        st.serialize_field("proxy_protocol", &m.proxy_protocol)?;
        st.serialize_field("idle_timeout_ms", &m.idle_timeout_ms)?;
        field_if_some(&mut st, "sni", &m.sni)?;
        field_if_some(&mut st, "health", &m.health)?;
        st.serialize_field("backend", &self.backend)?;
        st.serialize_field("on", &self.on)?;
        st.serialize_field("comment", &self.comment)?;
        field_if_some(&mut st, "per_source", &m.per_source)?;
        field_if_some(&mut st, "schedule", &m.schedule)?;
        field_if_some(&mut st, "quota", &m.quota)?;
        st.end()
    }
}

/// Active health checks of a forward's targets: a TCP connect every `interval_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HealthSpec {
    pub interval_ms: u64,
    pub timeout_ms: u64,
    pub rise: u32,
    pub fall: u32,
}
