//! Kernel forwards: NAT maps for the simple ones, own DNAT rules for the rest, and the
//! max-conns / conn-rate guards (see "Kernel forwards" in the module doc of `emit::nft`).

use std::collections::BTreeMap;

use super::expr::*;
use super::fam::*;
use super::family::*;
use super::names::*;
use super::out::*;
use super::rule_parts::*;
use super::schedule::*;
use super::prelude::*;

/// How one target treats the destination port of a connection to listen port `p`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TPort {
    /// Keep the port the client connected to.
    Keep,
    /// Always this port.
    Fixed(u16),
    /// `p - listen.lo + to` (a range mapped onto another range).
    Offset { listen_lo: u16, to_lo: u16, to_hi: u16 },
}

impl TPort {
    pub(super) fn of(listen: PortRange, target: Option<PortRange>) -> TPort {
        match target {
            _ if listen.is_single() => TPort::Fixed(target.map_or(listen.lo, |t| t.lo)),
            None => TPort::Keep,
            Some(t) if t.is_single() => TPort::Fixed(t.lo),
            Some(t) if t.lo == listen.lo => TPort::Keep,
            Some(t) => TPort::Offset { listen_lo: listen.lo, to_lo: t.lo, to_hi: t.hi },
        }
    }
    /// The target port for listen port `p`.
    pub(super) fn port(self, p: u16) -> u16 {
        match self {
            TPort::Keep => p,
            TPort::Fixed(x) => x,
            TPort::Offset { listen_lo, to_lo, to_hi } => {
                let v = u32::from(to_lo) + u32::from(p - listen_lo);
                v.min(u32::from(to_hi)) as u16
            }
        }
    }
}

/// The listen address of a forward, if it names one (`0.0.0.0` / `::` mean every address).
pub(super) fn listen_addr(f: &ForwardRule) -> Option<IpAddr> {
    f.listen.value.addr.filter(|a| !a.is_unspecified())
}

/// Address family a forward's listen address restricts it to (`0.0.0.0` means IPv4 only).
pub(super) fn listen_fam(f: &ForwardRule) -> Option<Fam> {
    match f.listen.value.addr {
        Some(IpAddr::V4(_)) => Some(Fam::V4),
        Some(IpAddr::V6(a)) if !a.is_unspecified() => Some(Fam::V6),
        _ => None,
    }
}

pub(super) fn ip_targets(f: &ForwardRule) -> Vec<(IpAddr, Option<PortRange>)> {
    f.targets
        .value
        .iter()
        .filter_map(|t| match &t.host {
            TargetHost::Ip(ip) => Some((*ip, t.ports)),
            TargetHost::Dns(_) => None,
        })
        .collect()
}

/// The DNS name of a kernel forward to one (`select` puts only single-target ones on the kernel
/// path) and the family it translates: AAAA records for an IPv6 listen address, else A.
pub(super) fn dns_target(f: &ForwardRule) -> Option<(&str, Fam)> {
    let [Target { host: TargetHost::Dns(name), .. }] = f.targets.value.as_slice() else { return None };
    Some((name.as_str(), if listen_fam(f) == Some(Fam::V6) { Fam::V6 } else { Fam::V4 }))
}

/// The DNAT chain of a kernel forward to a DNS name (the forwarder fills it).
pub(super) fn dns_chain(rule: &str, fam: Fam) -> String {
    format!("fdn{}_{rule}", if fam == Fam::V4 { 4 } else { 6 })
}

pub(super) fn is_map_forward(f: &ForwardRule) -> bool {
    f.schedule.as_ref().is_none_or(|s| s.during.is_none()) && ip_targets(f).len() == 1 && f.targets.value.len() == 1 && f.from.is_none() && f.iif.is_none() && !f.any_destination && f.listen.value.addr.is_none_or(|a| a.is_unspecified())
}

#[derive(Default)]
pub(super) struct NatMaps {
    /// Single listen port (hash maps).
    addr: [Vec<MapElem>; 2],
    port: [Vec<MapElem>; 2],
    /// Listen port range with a fixed or offset target port (interval maps).
    raddr: [Vec<MapElem>; 2],
    rport: [Vec<MapElem>; 2],
    /// Listen port range keeping the port (interval map).
    keep: [Vec<MapElem>; 2],
    /// Keys already taken per family: listen ranges per protocol, disjoint, by first port.
    used: [BTreeMap<(&'static str, u16), u16>; 2],
}

/// Does `r` overlap one of the disjoint ranges taken for `proto` (first port -> last port)?
/// The only candidate is the range starting last at or before `r.hi`.
fn taken(used: &BTreeMap<(&'static str, u16), u16>, proto: &'static str, r: PortRange) -> bool {
    used.range((proto, 0)..=(proto, r.hi)).next_back().is_some_and(|(_, &hi)| hi >= r.lo)
}

impl NatMaps {
    /// Add a map forward; false when one of its keys overlaps an earlier forward's.
    pub(super) fn try_add(&mut self, f: &ForwardRule) -> bool {
        let (ip, tports) = ip_targets(f)[0];
        let fam = Fam::of(&ip);
        if listen_fam(f).is_some_and(|lf| lf != fam) {
            return true; // `listen="0.0.0.0:…"` with an IPv6 target: nothing can match
        }
        let i = fam.idx();
        let listen = f.listen.value.ports;
        let protos = fproto_names(f.proto);
        if protos.iter().any(|p| taken(&self.used[i], p, listen)) {
            return false;
        }
        let comment = rule_comment(RuleKind::Forward, &f.name.value);
        let tp = TPort::of(listen, tports);
        for proto in protos {
            self.used[i].insert((proto, listen.lo), listen.hi);
            let to_addr = |key| MapElem { proto, key, comment: Some(comment.clone()), data: MapData::Addr(ip) };
            let to_port = |key, p| MapElem { proto, key, comment: None, data: MapData::Port(p) };
            match tp {
                TPort::Keep => self.keep[i].push(to_addr(listen)),
                TPort::Fixed(p) if listen.is_single() => {
                    self.addr[i].push(to_addr(listen));
                    self.port[i].push(to_port(listen, p));
                }
                TPort::Fixed(p) => {
                    self.raddr[i].push(to_addr(listen));
                    self.rport[i].push(to_port(listen, p));
                }
                TPort::Offset { .. } => {
                    self.raddr[i].push(to_addr(listen));
                    for p in listen.lo..=listen.hi {
                        self.rport[i].push(to_port(PortRange::single(p), tp.port(p)));
                    }
                }
            }
        }
        true
    }
}

/// The DNAT statement to one target (`dnat ip to ADDR[:PORT]`, or a port map for an offset
/// range).
fn target_nat(fam: Fam, ip: IpAddr, tp: TPort, listen: PortRange) -> S {
    let nat = |addr: E, port: Option<E>| Statement::DNAT(Some(NAT { addr: Some(addr), family: Some(fam.nat()), port, flags: None }));
    match tp {
        TPort::Keep => nat(s(ip.to_string()), None),
        TPort::Fixed(p) => nat(s(ip.to_string()), Some(n(u32::from(p)))),
        TPort::Offset { .. } => {
            let m = (listen.lo..=listen.hi).map(|p| (n(u32::from(p)), n(u32::from(tp.port(p))))).collect();
            nat(s(ip.to_string()), Some(map_lookup(payload("th", "dport"), mapping(m))))
        }
    }
}

/// The DNAT rules of a forward that does not fit the maps: in `fwd_dnat` (reached for this
/// host's own addresses), or with `destinations="any"` in the nat prerouting chain itself.
pub(super) fn own_dnat_rules(out: &mut Out, plan: &HostPlan, f: &ForwardRule) {
    let chain = if f.any_destination { chains::PREROUTING } else { chains::FWD_DNAT };
    let comment = rule_comment(RuleKind::Forward, &f.name.value);
    let listen = f.listen.value.ports;
    let from = f.from.as_ref().map(|m| addr_parts(plan, &m.value));
    let targets = ip_targets(f);
    for fam in FAMS {
        let tg: Vec<(IpAddr, TPort)> =
            targets.iter().filter(|(ip, _)| Fam::of(ip) == fam).map(|(ip, p)| (*ip, TPort::of(listen, *p))).collect();
        let dns = dns_target(f).filter(|(_, df)| *df == fam);
        if (tg.is_empty() && dns.is_none()) || listen_fam(f).is_some_and(|lf| lf != fam) {
            continue;
        }
        let mut base = l4_match(Some(fproto(f.proto)), None, None);
        if let Some(i) = &f.iif {
            base.push(iface_match(MetaKey::Iifname, false, &i.value));
        }
        if let Some(a) = listen_addr(f) {
            base.push(eq(payload(fam.proto(), "daddr"), s(a.to_string())));
        }
        if let Some(parts) = &from {
            match one_alt(parts, fam) {
                Some(a) => base.push(a.on(payload(fam.proto(), "saddr"))),
                None => continue,
            }
        }
        let dport = |r: PortRange| eq(payload("th", "dport"), port_expr(r));
        let nat = |addr: E, port: Option<E>| Statement::DNAT(Some(NAT { addr: Some(addr), family: Some(fam.nat()), port, flags: None }));
        let mut rules: Vec<Vec<S>> = Vec::new();
        if dns.is_some() {
            // DNS target: jump to the chain whose DNAT the forwarder writes from the answers.
            let e = vec![eq(meta(MetaKey::Nfproto), s(fam.nfproto())), dport(listen), counter()];
            rules.push([e, vec![Statement::Goto(JumpTarget { target: dns_chain(&f.name.value, fam).into() })]].concat());
        } else if f.health.is_some() {
            // Health-checked: jump to the dispatch chain the forwarder rewrites.
            let mut e = vec![eq(meta(MetaKey::Nfproto), s(fam.nfproto())), dport(listen), counter()];
            e.push(Statement::Goto(JumpTarget { target: health_chain(&f.name.value, fam, None).into() }));
            rules.push(e);
        } else if let [(ip, tp)] = tg[..] {
            rules.push(vec![dport(listen), counter(), target_nat(fam, ip, tp, listen)]);
        } else {
            let ng = || named(NamedExpression::Numgen(Numgen { mode: NgMode::Inc, ng_mod: tg.len() as u32, offset: None }));
            if tg.iter().all(|(_, tp)| *tp == TPort::Keep) {
                let m = tg.iter().enumerate().map(|(i, (ip, _))| (n(i as u32), s(ip.to_string()))).collect();
                rules.push(vec![dport(listen), counter(), nat(map_lookup(ng(), mapping(m)), None)]);
            } else if tg.iter().all(|(_, tp)| matches!(tp, TPort::Fixed(_))) {
                let m = tg
                    .iter()
                    .enumerate()
                    .map(|(i, (ip, tp))| (n(i as u32), concat(vec![s(ip.to_string()), n(u32::from(tp.port(listen.lo)))])))
                    .collect();
                rules.push(vec![dport(listen), counter(), nat(map_lookup(ng(), mapping(m)), None)]);
            } else {
                // Targets disagree on how ports map: one rule per listen port.
                for p in listen.lo..=listen.hi {
                    let m = tg
                        .iter()
                        .enumerate()
                        .map(|(i, (ip, tp))| (n(i as u32), concat(vec![s(ip.to_string()), n(u32::from(tp.port(p)))])))
                        .collect();
                    rules.push(vec![dport(PortRange::single(p)), counter(), nat(map_lookup(ng(), mapping(m)), None)]);
                }
            }
        }
        let time = time_match(f.schedule.as_ref());
        for r in rules {
            let mut expr = base.clone();
            expr.extend(r);
            match &time {
                // schedules: DNAT only inside the windows
                Some(t) => out.rule_with(chain, expr, Some(comment.clone()), base.len(), t),
                None => out.rule(chain, expr, Some(comment.clone())),
            }
        }
    }
}

/// Matches that pick a forward's new connections after DNAT (in `fwd_guard`, reached from the
/// filter `forward` and `output` chains), per family needed.
pub(super) fn forward_guard_matches(plan: &HostPlan, f: &ForwardRule) -> Vec<(ForwardProto, Option<Fam>, Vec<S>)> {
    let from = f.from.as_ref().map(|m| addr_parts(plan, &m.value));
    let fams: Vec<Option<Fam>> = match (&from, listen_addr(f)) {
        (None, None) => vec![None],
        (None, Some(a)) => vec![Some(Fam::of(&a))],
        (Some(p), a) => families(&[p], a.map(|a| Fam::of(&a))),
    };
    // One guard per protocol: nft can type `ct original proto-dst` only after a single-protocol
    // match (with `meta l4proto {tcp, udp}` it lists "0xbb8 [invalid type]", which nft cannot
    // read back).
    let protos: &[ForwardProto] = match f.proto {
        ForwardProto::Both => &[ForwardProto::Tcp, ForwardProto::Udp],
        ForwardProto::Tcp => &[ForwardProto::Tcp],
        ForwardProto::Udp => &[ForwardProto::Udp],
    };
    fams.into_iter()
        .flat_map(|fam| protos.iter().map(move |p| (fam, *p)))
        .map(|(fam, proto)| {
            let mut v = vec![
                ct_state(&["new"]),
                ct_status_dnat(),
                l4proto_is(proto),
                eq(ct_orig("proto-dst"), port_expr(f.listen.value.ports)),
            ];
            if let Some(fam) = fam {
                if let Some(a) = listen_addr(f) {
                    v.push(eq(ct_orig_addr(fam, "daddr"), s(a.to_string())));
                }
                if let Some(a) = from.as_ref().and_then(|p| one_alt(p, fam)) {
                    v.push(a.on(payload(fam.proto(), "saddr")));
                }
            }
            (proto, fam, v)
        })
        .collect()
}

/// The kernel forwards of a host, sorted into map forwards and forwards with rules of their own.
pub(super) struct KernelForwards<'a> {
    maps: NatMaps,
    /// Forwards that need their own DNAT rules, placed before the map rules: specific ones
    /// (`from=` or a listen address) first, then by name.
    own: Vec<&'a ForwardRule>,
    /// Map forwards whose key overlaps an earlier one: own rules after the map rules.
    demoted: Vec<&'a ForwardRule>,
}

impl<'a> KernelForwards<'a> {
    /// None when the host has no kernel forward (no NAT chains, maps or masquerade at all).
    pub(super) fn of(plan: &HostPlan<'a>) -> Option<KernelForwards<'a>> {
        if plan.kernel_forwards.is_empty() {
            return None;
        }
        let mut kf = KernelForwards { maps: NatMaps::default(), own: Vec::new(), demoted: Vec::new() };
        for f in &plan.kernel_forwards {
            if ip_targets(f).is_empty() && dns_target(f).is_none() {
                continue;
            }
            if !is_map_forward(f) {
                kf.own.push(f);
            } else if !kf.maps.try_add(f) {
                kf.demoted.push(f);
            }
        }
        kf.own.sort_by_key(|f| (f.from.is_none() && listen_addr(f).is_none(), f.name.value.clone()));
        Some(kf)
    }

    /// The NAT maps and the masquerade port sets.
    pub(super) fn declare_maps(&mut self, out: &mut Out, plan: &HostPlan) {
        let m = &mut self.maps;
        // Exact-port forwards in hash maps (the bulk, cheap to load); ranges in interval maps,
        // whose kernel backend (pipapo, for concatenated keys) is slow to fill.
        for fam in FAMS {
            let i = fam.idx();
            let (addr, port, raddr, rport, keep) = fam_maps(fam);
            let data = match fam {
                Fam::V4 => SetType::Ipv4Addr,
                Fam::V6 => SetType::Ipv6Addr,
            };
            out.fwd_map(addr, data.clone(), std::mem::take(&mut m.addr[i]), false, true);
            out.fwd_map(port, SetType::InetService, std::mem::take(&mut m.port[i]), false, false);
            out.fwd_map(raddr, data.clone(), std::mem::take(&mut m.raddr[i]), true, true);
            out.fwd_map(rport, SetType::InetService, std::mem::take(&mut m.rport[i]), true, false);
            out.fwd_map(keep, data, std::mem::take(&mut m.keep[i]), true, true);
        }
        let ports = |proto: &str| -> Vec<PortRange> {
            plan.kernel_forwards.iter().filter(|f| fproto_names(f.proto).contains(&proto)).map(|f| f.listen.value.ports).collect()
        };
        out.port_set(maps::PORTS_TCP, &ports("tcp"));
        out.port_set(maps::PORTS_UDP, &ports("udp"));
    }

    /// The rules of `fwd_dnat` (own rules, the map lookups, demoted forwards), the jumps into
    /// it and the masquerade of fwc's DNAT flows.
    pub(super) fn rules(&self, out: &mut Out, plan: &HostPlan) {
        for f in self.own.iter().filter(|f| !f.any_destination) {
            own_dnat_rules(out, plan, f);
        }
        for fam in FAMS {
            map_dnat_rules(out, fam);
        }
        for f in &self.demoted {
            own_dnat_rules(out, plan, f);
        }
        // `destinations="any"`: in prerouting itself, before the jump for local destinations.
        for f in self.own.iter().filter(|f| f.any_destination) {
            own_dnat_rules(out, plan, f);
        }
        for hooked in [chains::PREROUTING, chains::NAT_OUTPUT] {
            out.rule(hooked, vec![eq(fib_daddr_type(), s("local")), jump(chains::FWD_DNAT)], None);
        }
        for (proto, set) in [("tcp", maps::PORTS_TCP), ("udp", maps::PORTS_UDP)] {
            let expr = vec![
                ct_status_dnat(),
                eq(meta(MetaKey::L4proto), s(proto)),
                eq(ct_orig("proto-dst"), s(format!("@{set}"))),
                Statement::Masquerade(None),
            ];
            out.rule(chains::POSTROUTING, expr, None);
        }
    }
}

/// The maps of one family: (addr, port, range addr, range port, keep).
fn fam_maps(fam: Fam) -> (&'static str, &'static str, &'static str, &'static str, &'static str) {
    match fam {
        Fam::V4 => (maps::FWD4_ADDR, maps::FWD4_PORT, maps::FWD4R_ADDR, maps::FWD4R_PORT, maps::FWD4_KEEP),
        Fam::V6 => (maps::FWD6_ADDR, maps::FWD6_PORT, maps::FWD6R_ADDR, maps::FWD6R_PORT, maps::FWD6_KEEP),
    }
}

/// The three map lookups of one family in `fwd_dnat`: exact ports first (hash maps), then
/// ranges; a key missing from a map ends the rule.
fn map_dnat_rules(out: &mut Out, fam: Fam) {
    let (addr, port, raddr, rport, keep) = fam_maps(fam);
    let l4 = || eq(meta(MetaKey::L4proto), set(vec![s("tcp"), s("udp")]));
    let lookup = |m: &str| map_lookup(l4_key(), s(format!("@{m}")));
    // `meta nfproto`: the lookups must not see the other family's packets (they would
    // count them in the element counters and hand `dnat ip` an IPv6 packet).
    let nfproto = || eq(meta(MetaKey::Nfproto), s(fam.nfproto()));
    for (a, p) in [(addr, port), (raddr, rport)] {
        let both = NAT { addr: Some(lookup(a)), family: Some(fam.nat()), port: Some(lookup(p)), flags: None };
        out.rule(chains::FWD_DNAT, vec![nfproto(), l4(), Statement::DNAT(Some(both))], None);
    }
    let kept = NAT { addr: Some(lookup(keep)), family: Some(fam.nat()), port: None, flags: None };
    out.rule(chains::FWD_DNAT, vec![nfproto(), l4(), Statement::DNAT(Some(kept))], None);
}

/// The regular NAT chain and the three NAT base chains.
pub(super) fn declare_nat_chains(out: &mut Out) {
    out.chain(chains::FWD_DNAT, None);
    out.chain(chains::PREROUTING, Some((NfChainType::NAT, NfHook::Prerouting, -100, NfChainPolicy::Accept)));
    out.chain(chains::NAT_OUTPUT, Some((NfChainType::NAT, NfHook::Output, -100, NfChainPolicy::Accept)));
    out.chain(chains::POSTROUTING, Some((NfChainType::NAT, NfHook::Postrouting, 100, NfChainPolicy::Accept)));
}

/// max-conns / conn-rate guards of kernel forwards, with their comments: one regular chain,
/// jumped to from both `forward` (remote clients) and `output` (clients on the host itself),
/// so both paths share one `ct count` list and one token bucket per guard (the state lives in
/// the rule).
pub(super) fn forward_guards(plan: &HostPlan) -> Vec<(Vec<S>, String, Option<Value>)> {
    let mut guards = Vec::new();
    for f in &plan.kernel_forwards {
        let comment = rule_comment(RuleKind::Forward, &f.name.value);
        for (proto, fam, matches) in forward_guard_matches(plan, f) {
            if let Some(max) = &f.max_conns {
                let mut e = matches.clone();
                e.push(Statement::CTCount(CTCount { val: n(max.value), inv: Some(true) }));
                e.push(counter());
                e.push(reject(proto == ForwardProto::Tcp));
                guards.push((e, comment.clone(), None));
            }
            if let Some(rate) = &f.conn_rate {
                let mut e = matches.clone();
                e.push(limit(&rate.value, true, rate.value.count));
                e.push(counter());
                e.push(drop_());
                guards.push((e, comment.clone(), None));
            }
            // per-source limits, after the forward's own limits
            if let Some(p) = &f.per_source {
                for g in super::persource::guards(&matches, fam, "fwd", &f.name.value, p, proto == ForwardProto::Tcp) {
                    guards.push((g.expr, comment.clone(), g.elem_stmts));
                }
            }
        }
    }
    guards
}

/// The targets of a health-checked kernel forward with their index among all its targets, in
/// family `fam`.
fn health_targets(f: &ForwardRule, fam: Fam) -> Vec<(usize, IpAddr, TPort)> {
    let listen = f.listen.value.ports;
    ip_targets(f)
        .into_iter()
        .enumerate()
        .filter(|(_, (ip, _))| Fam::of(ip) == fam && listen_fam(f).is_none_or(|lf| lf == fam))
        .map(|(i, (ip, p))| (i, ip, TPort::of(listen, p)))
        .collect()
}

/// Dispatch chain (`idx: None`) or target chain of a health-checked kernel forward.
pub(super) fn health_chain(rule: &str, fam: Fam, idx: Option<usize>) -> String {
    let f = if fam == Fam::V4 { 4 } else { 6 };
    match idx {
        None => format!("fhc{f}_{rule}"),
        Some(i) => format!("fhc{f}_{rule}_t{i}"),
    }
}

/// The dispatch rule over `targets` (target chains): `numgen inc mod N vmap { i : goto … }`.
/// The forwarder builds the same rule over the targets that are up (forwarder/src/kernel.rs).
fn dispatch_rule(targets: &[String]) -> Vec<S> {
    let ng = named(NamedExpression::Numgen(Numgen { mode: NgMode::Inc, ng_mod: targets.len() as u32, offset: None }));
    let m = targets
        .iter()
        .enumerate()
        .map(|(i, c)| (n(i as u32), Expression::Verdict(Verdict::Goto(JumpTarget { target: c.clone().into() }))))
        .collect();
    vec![Statement::VerdictMap(stmt::VerdictMap { key: ng, data: mapping(m) })]
}

/// Chains of the health-checked kernel forwards: per family, a dispatch chain and one chain per
/// target holding its DNAT.
pub(super) fn health_chains(out: &mut Out, plan: &HostPlan) {
    for f in plan.kernel_forwards.iter().filter(|f| f.health.is_some()) {
        let comment = rule_comment(RuleKind::Forward, &f.name.value);
        let listen = f.listen.value.ports;
        for fam in FAMS {
            let tg = health_targets(f, fam);
            if tg.is_empty() {
                continue;
            }
            let dispatch = health_chain(&f.name.value, fam, None);
            out.chain(&dispatch, None);
            let mut names = Vec::new();
            for (i, ip, tp) in tg {
                let chain = health_chain(&f.name.value, fam, Some(i));
                out.chain(&chain, None);
                let st = target_nat(fam, ip, tp, listen);
                // nft wants the transport protocol matched before a port is mapped.
                let mut e = l4_match(Some(fproto(f.proto)), None, None);
                e.push(st);
                out.rule(&chain, e, Some(comment.clone()));
                names.push(chain);
            }
            out.rule(&dispatch, dispatch_rule(&names), Some(comment.clone()));
        }
    }
}

/// The (empty) DNAT chains of kernel forwards to DNS names: the forwarder installs one rule
/// per chain once the name resolves (forwarder/src/kernel.rs).
pub(super) fn dns_chains(out: &mut Out, plan: &HostPlan) {
    for f in &plan.kernel_forwards {
        if let Some((_, fam)) = dns_target(f) {
            out.chain(&dns_chain(&f.name.value, fam), None);
        }
    }
}

/// forward.json's view of a kernel forward to a DNS name (see [`dns_chains`]).
pub fn kernel_dns(f: &ForwardRule) -> Option<fwc_artifacts::KernelDns> {
    let (name, fam) = dns_target(f)?;
    let port = match TPort::of(f.listen.value.ports, f.targets.value[0].ports) {
        TPort::Fixed(p) => Some(p),
        _ => None, // select keeps shifted ranges in userspace: Keep
    };
    let protos = match f.proto {
        ForwardProto::Tcp => vec![fwc_artifacts::ListenerProto::Tcp],
        ForwardProto::Udp => vec![fwc_artifacts::ListenerProto::Udp],
        ForwardProto::Both => vec![fwc_artifacts::ListenerProto::Tcp, fwc_artifacts::ListenerProto::Udp],
    };
    Some(fwc_artifacts::KernelDns {
        rule: f.name.value.clone(),
        name: name.to_string(),
        family: if fam == Fam::V4 { 4 } else { 6 },
        chain: dns_chain(&f.name.value, fam),
        protos,
        port,
    })
}

/// forward.json's view of a health-checked kernel forward's chains (see [`health_chains`]).
pub fn health_dispatch(f: &ForwardRule) -> Vec<fwc_artifacts::KernelDispatch> {
    FAMS.into_iter()
        .filter_map(|fam| {
            let tg = health_targets(f, fam);
            (!tg.is_empty()).then(|| fwc_artifacts::KernelDispatch {
                chain: health_chain(&f.name.value, fam, None),
                targets: tg.iter().map(|(i, _, _)| (*i, health_chain(&f.name.value, fam, Some(*i)))).collect(),
            })
        })
        .collect()
}

/// What the forwarder probes for each target: its address and the port a connection to the
/// forward's first listen port is sent to.
pub fn health_probe_targets(f: &ForwardRule) -> Vec<fwc_artifacts::ForwardTarget> {
    let listen = f.listen.value.ports;
    ip_targets(f)
        .into_iter()
        .map(|(ip, p)| {
            let port = match TPort::of(listen, p) {
                TPort::Keep => listen.lo,
                tp => tp.port(listen.lo),
            };
            fwc_artifacts::ForwardTarget { host: ip.to_string(), port }
        })
        .collect()
}

#[cfg(test)]
mod taken_tests {
    use super::*;

    /// The ordered lookup finds exactly the overlaps a scan of every taken range finds.
    #[test]
    fn taken_agrees_with_a_scan() {
        let mut rng = fastrand::Rng::with_seed(7);
        let mut used = BTreeMap::new();
        let mut all: Vec<(&'static str, PortRange)> = Vec::new();
        for _ in 0..2000 {
            let proto = if rng.bool() { "tcp" } else { "udp" };
            let lo = rng.u16(1..2000);
            let r = PortRange { lo, hi: lo + rng.u16(0..5) };
            let scan = all.iter().any(|(q, u)| *q == proto && u.overlaps(&r));
            assert_eq!(taken(&used, proto, r), scan, "{proto} {r:?}");
            if !scan {
                used.insert((proto, r.lo), r.hi);
                all.push((proto, r));
            }
        }
    }
}
