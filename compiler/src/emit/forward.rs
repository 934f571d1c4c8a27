//! `forward.json`: one listener per (userspace forward, protocol, listen port). Port ranges
//! expand to one listener per port, targets keep the offset into their own range.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::artifacts::*;
use crate::model::*;
use crate::place::select::HostPlan;

pub fn emit(plan: &HostPlan) -> ForwardArtifact {
    let mut listeners = Vec::new();
    for f in &plan.userspace_forwards {
        let protos: &[ListenerProto] = match f.proto {
            ForwardProto::Tcp => &[ListenerProto::Tcp],
            ForwardProto::Udp => &[ListenerProto::Udp],
            ForwardProto::Both => &[ListenerProto::Tcp, ListenerProto::Udp],
        };
        let allow_from = allow_from(plan, f.from.as_ref().map(|m| &m.value));
        for &proto in protos {
            for port in f.listen.ports.lo..=f.listen.ports.hi {
                let offset = port - f.listen.ports.lo;
                let targets = f
                    .targets
                    .value
                    .iter()
                    .map(|t| ForwardTarget {
                        host: match &t.host {
                            TargetHost::Ip(ip) => ip.to_string(),
                            TargetHost::Dns(n) => n.clone(),
                        },
                        port: match t.ports {
                            None => port,
                            Some(r) if r.is_single() => r.lo,
                            Some(r) => r.lo + offset,
                        },
                    })
                    .collect();
                listeners.push(Listener {
                    rule: f.name.value.clone(),
                    proto,
                    listen_addr: match f.listen.addr {
                        Some(a) => a.to_string(),
                        None => "::".into(),
                    },
                    listen_port: port,
                    targets,
                    allow_from: allow_from.clone(),
                    up_bytes_per_sec: f.up.as_ref().map(|b| b.value.0),
                    down_bytes_per_sec: f.down.as_ref().map(|b| b.value.0),
                    burst_bytes: f.burst.as_ref().map(|b| b.value),
                    max_conns: f.max_conns.as_ref().map(|m| m.value),
                    conn_rate: f.conn_rate.as_ref().map(|r| ConnRateLimit {
                        count: r.count,
                        period_secs: r.per.seconds() as u32,
                        burst: r.burst.unwrap_or(r.count),
                    }),
                    proxy_protocol: f.proxy_protocol.as_ref().map(|p| p.value),
                    idle_timeout_ms: f.idle_timeout_ms.as_ref().map(|t| t.value).unwrap_or(match proto {
                        ListenerProto::Tcp => DEFAULT_TCP_IDLE_TIMEOUT_MS,
                        ListenerProto::Udp => DEFAULT_UDP_IDLE_TIMEOUT_MS,
                    }),
                    connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS,
                    sni: f.sni.as_ref().map(|s| s.value.clone()),
                    health_check: f.health.as_ref().map(|h| health_check(&h.value)),
                    per_source: f.per_source.as_ref().map(per_source_limit),
                });
            }
        }
    }
    listeners.sort_by(|a, b| (&a.rule, a.proto, a.listen_port).cmp(&(&b.rule, b.proto, b.listen_port)));
    let kernel_health = plan
        .kernel_forwards
        .iter()
        .filter_map(|f| {
            let h = f.health.as_ref()?;
            let dispatch = crate::emit::nft::health_dispatch(f);
            (!dispatch.is_empty()).then(|| KernelHealth {
                rule: f.name.value.clone(),
                targets: crate::emit::nft::health_probe_targets(f),
                health_check: health_check(&h.value),
                dispatch,
            })
        })
        .collect();
    let kernel_dns = plan.kernel_forwards.iter().filter_map(|f| crate::emit::nft::kernel_dns(f)).collect();
    ForwardArtifact { version: ARTIFACT_VERSION, listeners, kernel_health, kernel_dns }
}

fn health_check(h: &HealthSpec) -> HealthCheck {
    HealthCheck { interval_ms: h.interval_ms, timeout_ms: h.timeout_ms, rise: h.rise, fall: h.fall }
}

/// Client networks as CIDRs (ranges are split into the CIDRs that cover them exactly).
fn allow_from(plan: &HostPlan, m: Option<&AddrMatch>) -> Vec<String> {
    let elems: Vec<AddrElem> = match m {
        None => return Vec::new(),
        Some(AddrMatch::Literal(l)) => l.clone(),
        Some(AddrMatch::Set(name)) => plan.set(name).map(|s| s.elements.iter().map(|e| e.value).collect()).unwrap_or_default(),
    };
    let mut out: Vec<String> = elems.iter().flat_map(cidrs).map(|n| n.to_string()).collect();
    out.sort();
    out.dedup();
    out
}

pub(crate) fn cidrs(e: &AddrElem) -> Vec<IpNet> {
    match *e {
        AddrElem::Net(n) => vec![n],
        AddrElem::Range(IpAddr::V4(a), IpAddr::V4(b)) => ipnet::Ipv4Subnets::new(a, b, 0).map(IpNet::V4).collect(),
        AddrElem::Range(IpAddr::V6(a), IpAddr::V6(b)) => ipnet::Ipv6Subnets::new(a, b, 0).map(IpNet::V6).collect(),
        AddrElem::Range(..) => Vec::new(),
    }
}

/// A forward's per-source limits for the forwarder: the same burst as the kernel's.
fn per_source_limit(p: &crate::model::PerSource) -> fwc_artifacts::PerSourceLimit {
    fwc_artifacts::PerSourceLimit {
        conn_rate: p.rate.as_ref().map(|r| ConnRateLimit { count: r.count, period_secs: r.per.seconds() as u32, burst: crate::features::persource::burst(&r.value) }),
        max_conns: p.max_conns.as_ref().map(|m| m.value),
        prefix4: p.prefix4,
        prefix6: p.prefix6,
        size: p.size,
    }
}
