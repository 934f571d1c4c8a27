//! `forward` rules: listen address, targets, limits, health checks; their value parsers.

use std::net::IpAddr;

use crate::read::kdl_reader::Node as KdlNode;
use crate::model::*;
use crate::read::units::{self, UnitError};

use super::parser::{Parser, Props};
use super::values::{looks_like_ipv4, parse_ifname, valid_dns_name};

pub(super) const FORWARD_PROPS: &[&str] = &[
    "proto", "listen", "to", "from", "in", "destinations", "bandwidth", "up", "down", "burst", "max-conns", "conn-rate", "proxy-protocol",
    "idle-timeout", "sni", "health-check", "health-interval", "health-timeout", "health-rise", "health-fall", "backend", "on", "comment",
    // per-source limits (crate::features::persource)
    "conn-rate-per-source", "max-conns-per-source", "per-source-prefix4", "per-source-prefix6", "per-source-size", "rate-per-source",
    // schedules (crate::features::schedule)
    "during", "tz", "until",
    // traffic quotas (crate::features::quota)
    "quota", "quota-reset-day", "over-quota",
];

impl Parser<'_, '_> {
    pub(super) fn forward(&mut self, node: &KdlNode) -> Option<ForwardRule> {
        let name = self.name(node, "forward")?;
        let rule = format!("forward \"{}\"", name.value);
        let mut p = self.props(node, &rule, FORWARD_PROPS, 1);
        self.no_children(node, &rule);
        let proto = self
            .choice(&mut p, "proto", &[("tcp", ForwardProto::Tcp), ("udp", ForwardProto::Udp), ("both", ForwardProto::Both)])
            .map_or(ForwardProto::Tcp, |s| s.value);
        let listen = self.required(&mut p, "listen", "\":8080\"").and_then(|(t, s)| self.convert(&rule, "listen", &t, s, parse_listen));
        let targets = self.required(&mut p, "to", "\"10.0.0.5:80\"").and_then(|(t, s)| self.convert(&rule, "to", &t, s, parse_targets));
        let bandwidth = self.parsed(&mut p, "bandwidth", units::parse_bandwidth);
        let up = self.parsed(&mut p, "up", units::parse_bandwidth).or(bandwidth.clone());
        let down = self.parsed(&mut p, "down", units::parse_bandwidth).or(bandwidth);
        let iif = self.parsed(&mut p, "in", |s| crate::features::headers::parse_ifnames(s, parse_ifname));
        let destinations = self.choice(&mut p, "destinations", &[("local", false), ("any", true)]);
        if let Some(d) = destinations.as_ref().filter(|d| d.value && iif.is_none()) {
            self.error("destinations-without-in", "destinations=\"any\" without in=: it would DNAT every routed connection to this port, the LAN's own too", d.span, "no in=")
                .rule(&rule)
                .help("add in=\"wan0\" (the interfaces the routed connections arrive on)");
        }
        // Read in the order the properties were always read (their diagnostics' order).
        let from = self.addr_match(&mut p, "from");
        let any_destination = destinations.is_some_and(|d| d.value);
        let burst = self.parsed(&mut p, "burst", units::parse_size);
        let max_conns = self.number(&mut p, "max-conns", 1, 10_000_000).map(|s| Spanned::new(s.value as u32, s.span));
        let conn_rate = self.parsed(&mut p, "conn-rate", units::parse_event_rate);
        let proxy_protocol = self.parsed(&mut p, "proxy-protocol", parse_proxy_protocol);
        let idle_timeout_ms = self.parsed(&mut p, "idle-timeout", units::parse_duration_ms);
        let sni = self.parsed(&mut p, "sni", parse_sni);
        let health = self.health(&mut p, &rule);
        let quota = self.quota(&mut p, &rule);
        let backend = self
            .choice(&mut p, "backend", &[("auto", BackendChoice::Auto), ("kernel", BackendChoice::Kernel), ("userspace", BackendChoice::Userspace)])
            .unwrap_or(Spanned::new(BackendChoice::Auto, Span::default()));
        let on = self.selector(&mut p);
        let comment = self.comment(&mut p);
        let span = self.span(node.span());
        let per_source = self.per_source(&mut p, None);
        let schedule = self.schedule(&mut p);
        let more = ForwardMore { burst, max_conns, conn_rate, proxy_protocol, idle_timeout_ms, sni, health, per_source, schedule, quota };
        let f = ForwardRule {
            proto,
            from,
            iif,
            any_destination,
            up,
            down,
            backend,
            on,
            comment,
            span,
            more: More::new(more),
            listen: listen?,
            targets: targets?,
            name,
        };
        Some(f)
    }

    /// `health-check="tcp"` with optional `health-interval`, `health-timeout`, `health-rise`,
    /// `health-fall`; the others without `health-check` are an error.
    pub(super) fn health(&mut self, p: &mut Props, rule: &str) -> Option<Spanned<HealthSpec>> {
        let kind = self.choice(p, "health-check", &[("tcp", ())]);
        let interval = self.parsed(p, "health-interval", units::parse_duration_ms);
        let timeout = self.parsed(p, "health-timeout", units::parse_duration_ms);
        let rise = self.number(p, "health-rise", 1, 100);
        let fall = self.number(p, "health-fall", 1, 100);
        let Some(kind) = kind else {
            if let Some(span) = interval.as_ref().map(|v| v.span).or(timeout.as_ref().map(|v| v.span)).or(rise.as_ref().map(|v| v.span)).or(fall.as_ref().map(|v| v.span)) {
                self.error("health-without-check", "health-interval/-timeout/-rise/-fall without health-check", span, "no health-check")
                    .rule(rule)
                    .help("add health-check=\"tcp\", or remove the health-* settings");
            }
            return None;
        };
        let interval_ms = interval.as_ref().map_or(fwc_artifacts::DEFAULT_HEALTH_INTERVAL_MS, |v| v.value);
        let spec = HealthSpec {
            interval_ms,
            // Default: 2 s, at most half the interval.
            timeout_ms: timeout.as_ref().map_or(fwc_artifacts::DEFAULT_HEALTH_TIMEOUT_MS.min(interval_ms / 2).max(1), |v| v.value),
            rise: rise.map_or(fwc_artifacts::DEFAULT_HEALTH_RISE, |v| v.value as u32),
            fall: fall.map_or(fwc_artifacts::DEFAULT_HEALTH_FALL, |v| v.value as u32),
        };
        if spec.timeout_ms >= spec.interval_ms {
            let span = timeout.as_ref().map_or(kind.span, |v| v.span);
            self.error("bad-health-timeout", format!("health-timeout ({} ms) must be shorter than health-interval ({} ms)", spec.timeout_ms, spec.interval_ms), span, "too long")
                .rule(rule)
                .help("a probe must finish before the next one starts: shorten health-timeout or lengthen health-interval");
        }
        Some(Spanned::new(spec, kind.span))
    }
}

pub(super) fn parse_proxy_protocol(s: &str) -> Result<u8, UnitError> {
    match s {
        "1" | "v1" => Ok(1),
        "2" | "v2" => Ok(2),
        _ => Err(UnitError { message: format!("PROXY protocol version \"{s}\" does not exist"), help: "write proxy-protocol=1 or proxy-protocol=2".into() }),
    }
}

pub(super) const LISTEN_HELP: &str = "write listen=\":8080\", \"203.0.113.1:80\", \"[2001:db8::1]:443\" or a range \":27015-27020\"";

/// `":8080"`, `"0.0.0.0:80"`, `"[::1]:80-90"`, or a bare port number.
pub(super) fn parse_listen(s: &str) -> Result<Listen, UnitError> {
    let bad = |m: String| UnitError { message: m, help: LISTEN_HELP.into() };
    if let Ok(ports) = units::parse_port_range(s) {
        return Ok(Listen { addr: None, ports });
    }
    let (host, ports) = if let Some(rest) = s.strip_prefix('[') {
        let (h, p) = rest.split_once("]:").ok_or_else(|| bad(format!("\"{s}\" has no port")))?;
        (h, p)
    } else {
        s.rsplit_once(':').ok_or_else(|| bad(format!("\"{s}\" has no port")))?
    };
    let addr = if host.is_empty() {
        None
    } else {
        Some(host.parse::<IpAddr>().map_err(|_| bad(format!("\"{host}\" is not an IP address (listen addresses are literals)")))?)
    };
    let ports = units::parse_port_range(ports).map_err(|e| UnitError { message: e.message, help: LISTEN_HELP.into() })?;
    Ok(Listen { addr, ports })
}

pub(super) const TARGET_HELP: &str = "write to=\"10.0.0.5:80\", \"10.0.0.5\" (same port), \"[2001:db8::5]:80\", \"api.internal:8443\" or several, comma separated";

pub(super) fn parse_targets(s: &str) -> Result<Vec<Target>, UnitError> {
    s.split(',').map(|t| parse_target(t.trim())).collect()
}

pub(super) fn parse_target(s: &str) -> Result<Target, UnitError> {
    let bad = |m: String| UnitError { message: m, help: TARGET_HELP.into() };
    if s.is_empty() {
        return Err(bad("empty target".into()));
    }
    let port = |p: &str| units::parse_port_range(p).map_err(|e| UnitError { message: e.message, help: TARGET_HELP.into() });
    if let Some(rest) = s.strip_prefix('[') {
        let (h, p) = match rest.split_once(']') {
            Some((h, "")) => (h, None),
            Some((h, p)) => (h, Some(p.strip_prefix(':').ok_or_else(|| bad(format!("\"{s}\": expected :port after ]")))?)),
            None => return Err(bad(format!("\"{s}\" misses the closing ]"))),
        };
        let ip: IpAddr = h.parse().map_err(|_| bad(format!("\"{h}\" is not an IPv6 address")))?;
        return Ok(Target { host: TargetHost::Ip(ip), ports: p.map(port).transpose()? });
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(Target { host: TargetHost::Ip(ip), ports: None });
    }
    let (host, ports) = match s.rsplit_once(':') {
        Some((h, p)) => (h, Some(port(p)?)),
        None => (s, None),
    };
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(Target { host: TargetHost::Ip(ip), ports });
    }
    if looks_like_ipv4(host) {
        return Err(bad(format!("\"{host}\" is not a valid IPv4 address")));
    }
    if !valid_dns_name(host) {
        return Err(bad(format!("\"{host}\" is neither an IP address nor a DNS name")));
    }
    Ok(Target { host: TargetHost::Dns(host.to_ascii_lowercase()), ports })
}

/// `sni=`: a DNS name, or `*.` and a DNS name (the wildcard covers exactly one label).
pub(super) fn parse_sni(s: &str) -> Result<String, UnitError> {
    let help = "write sni=\"www.example.com\" or sni=\"*.example.com\" (one wildcard label, leftmost)";
    let name = s.strip_suffix('.').unwrap_or(s).to_ascii_lowercase();
    let host = name.strip_prefix("*.").unwrap_or(&name);
    if host.parse::<IpAddr>().is_ok() {
        return Err(UnitError { message: format!("\"{s}\" is an IP address; TLS server names are DNS names"), help: help.into() });
    }
    if !valid_dns_name(host) {
        return Err(UnitError { message: format!("\"{s}\" is not a DNS name or *.name"), help: help.into() });
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suggest::did_you_mean;
    use crate::read::syntax::rules::FILTER_PROPS;

    #[test]
    fn listen_and_targets() {
        assert_eq!(parse_listen(":8080").unwrap(), Listen { addr: None, ports: PortRange::single(8080) });
        assert_eq!(parse_listen("8080").unwrap().ports, PortRange::single(8080));
        assert_eq!(parse_listen("[2001:db8::1]:80-90").unwrap().ports, PortRange { lo: 80, hi: 90 });
        assert!(parse_listen("example.com:80").is_err());
        let t = parse_targets("10.0.0.8:7000,10.0.0.9:7000").unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(parse_target("api.internal:8443").unwrap().host, TargetHost::Dns("api.internal".into()));
        assert_eq!(parse_target("[2001:db8::5]").unwrap().ports, None);
        assert!(parse_target("10.0.0.300:80").is_err());
        assert!(parse_target("bad_name:80").is_err());
    }

    #[test]
    fn suggestions() {
        assert_eq!(did_you_mean("prot", FILTER_PROPS.iter().copied()), Some("proto"));
        assert_eq!(did_you_mean("bandwith", FORWARD_PROPS.iter().copied()), Some("bandwidth"));
        assert_eq!(did_you_mean("zzzzzz", FORWARD_PROPS.iter().copied()), None);
    }
}
