//! The proof that an import changes nothing (pure): a systematic sample of flows — every
//! rule's boundary addresses and ports, both families, each interface, plus seeded random
//! flows — evaluated on the ORIGINAL ruleset (its nftables JSON, with fwc's evaluator) to
//! write `tests/imported.kdl`, and on both sides for `fwc import --verify`.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use fwc_compiler::eval::{Evaluator, Explanation, Flow, Origin, Verdict, L4};

use super::model::*;
use super::render::q;

/// A flow's fate: verdict and DNAT target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub verdict: Verdict,
    pub dnat: Option<(IpAddr, u16)>,
    /// Who decided, in words (`rule … (chain …)`, `policy drop of chain …`).
    pub by: String,
}

pub fn outcome(x: &Explanation) -> Outcome {
    Outcome { verdict: x.verdict, dnat: x.dnat, by: x.decided_by.what.clone() }
}

const LOCAL4: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
const LOCAL6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const REMOTE4: Ipv4Addr = Ipv4Addr::new(198, 18, 200, 1);
const REMOTE6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 1);
const ROUTED4: Ipv4Addr = Ipv4Addr::new(198, 18, 201, 10);
const ROUTED6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xfffe, 0, 0, 0, 0, 10);

fn step(a: IpAddr, up: bool) -> IpAddr {
    match a {
        IpAddr::V4(x) => {
            let n = u32::from(x);
            IpAddr::V4(Ipv4Addr::from(if up { n.saturating_add(1) } else { n.saturating_sub(1) }))
        }
        IpAddr::V6(x) => {
            let n = u128::from(x);
            IpAddr::V6(Ipv6Addr::from(if up { n.saturating_add(1) } else { n.saturating_sub(1) }))
        }
    }
}

/// First and last address of an element (`a`, `a/len`, `a-b`).
fn bounds(e: &str) -> Option<(IpAddr, IpAddr)> {
    if let Some((a, b)) = e.split_once('-') {
        return Some((a.parse().ok()?, b.parse().ok()?));
    }
    if let Ok(n) = e.parse::<ipnet::IpNet>() {
        return Some((n.network(), n.broadcast()));
    }
    let a: IpAddr = e.parse().ok()?;
    Some((a, a))
}

fn port_bounds(p: &str) -> Vec<u16> {
    let mut out = Vec::new();
    for part in p.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.parse::<u16>(), b.parse::<u16>()) {
            out.extend([a.saturating_sub(1).max(1), a, b, b.saturating_add(1)]);
        }
    }
    out
}

/// Tiny deterministic generator (xorshift), so the sample is the same on every run (the
/// import readers' fuzz test draws its cases from it too).
pub struct Rng(pub u64);
impl Rng {
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[(self.next() % v.len() as u64) as usize]
    }
}

fn origin_of(kind: &str) -> Origin {
    match kind {
        "forward" => Origin::Forward,
        "output" => Origin::Output,
        _ => Origin::Input,
    }
}

fn elems_of<'a>(imp: &'a Imported, a: &'a Addrs) -> Vec<&'a str> {
    match a {
        Addrs::List(l) => l.iter().map(String::as_str).collect(),
        Addrs::Set(s) => imp.sets.iter().filter(|x| &x.name == s).flat_map(|x| x.elems.iter().map(String::as_str)).collect(),
    }
}

/// The sample: flows derived from every rule and forward (boundaries), from every rule of the
/// original (`original`: [`super::translate::probe_chains`], so a rule left out or lost still
/// gets its flows), then `random` seeded ones.
pub fn sample(imp: &Imported, original: &[Chain], random: usize, seed: u64) -> Vec<Flow> {
    let mut flows: Vec<Flow> = Vec::new();
    let mut seen = BTreeSet::new();
    // ICMP that is conntrack-`invalid` on its own (an unsolicited reply or error) is dropped by
    // fwc's input chain before any rule, which fwc cannot change: the import refuses rules
    // accepting it, and the sample leaves such first packets to this host out.
    // Neighbour discovery is accepted by fwc itself before any rule (the kernel ignores it
    // unless it comes from the link, hop limit 255, which no sampled flow does): not sampled.
    let nd = |f: &Flow| f.proto == L4::Icmpv6 && (133..=136).contains(&f.dport);
    let expressible = |f: &Flow| !nd(f) && (f.proto.has_ports() || f.origin != Origin::Input || super::translate::icmp_opens(f.proto == L4::Icmpv6, f.dport as u8));
    let mut push = |f: Flow, flows: &mut Vec<Flow>| {
        if f.saddr.is_ipv4() == f.daddr.is_ipv4() && expressible(&f) && seen.insert(f.to_string()) {
            flows.push(f);
        }
    };
    let mut addrs: Vec<IpAddr> = vec![REMOTE4.into(), REMOTE6.into()];
    let mut ports: Vec<u16> = vec![22, 80, 443, 40000];
    let mut ifaces: Vec<Option<String>> = vec![None];
    // The prerouting block's packets are the input and forward chains' (its rules' own flows
    // are sampled as arriving): the random flows' origins stay those of the filter chains.
    let kinds: Vec<&str> = imp.chains.iter().map(|c| c.kind).filter(|k| *k != "prerouting").collect();
    let chains = imp.chains.iter().map(|c| (c, false)).chain(original.iter().map(|c| (c, true)));
    for (c, probe) in chains {
        for r in &c.rules {
            let cond = &r.cond;
            let protos: Vec<L4> = match cond.proto.as_deref() {
                Some("tcp") => vec![L4::Tcp, L4::Udp],
                Some("udp") => vec![L4::Udp, L4::Tcp],
                Some("both") => vec![L4::Tcp, L4::Udp],
                Some("icmp") => vec![L4::Icmp, L4::Tcp],
                Some("icmpv6") => vec![L4::Icmpv6, L4::Tcp],
                _ => vec![L4::Tcp, L4::Udp, L4::Icmp, L4::Icmpv6],
            };
            let mut srcs: Vec<IpAddr> = Vec::new();
            let mut dsts: Vec<IpAddr> = Vec::new();
            for (side, out) in [(&cond.from, &mut srcs), (&cond.to, &mut dsts)] {
                if let Some(a) = side {
                    for e in elems_of(imp, a).into_iter().take(16) {
                        if let Some((lo, hi)) = bounds(e) {
                            out.extend([step(lo, false), lo, hi, step(hi, true)]);
                        }
                    }
                }
            }
            let fams: Vec<bool> = match cond.family {
                Some(Family::V4) => vec![false, true],
                Some(Family::V6) => vec![true, false],
                None => vec![false, true],
            };
            if srcs.is_empty() {
                srcs = fams.iter().map(|v6| if *v6 { IpAddr::V6(REMOTE6) } else { IpAddr::V4(REMOTE4) }).collect();
            }
            // A port list that gives no number (a port fwc cannot read) samples the defaults.
            let dports: Vec<u16> = cond.port.as_deref().map(port_bounds).filter(|v| !v.is_empty()).unwrap_or_else(|| vec![22]);
            let sports: Vec<u16> = cond.sport.as_deref().map(port_bounds).filter(|v| !v.is_empty()).unwrap_or_else(|| vec![40000]);
            // An interface list (`in="br0,wbr0"`) samples its first; the random flows the rest.
            let first = |l: &Option<String>| l.as_deref().and_then(|l| l.split(',').next()).map(str::to_string);
            let iifs: Vec<Option<String>> = vec![first(&cond.iif), None];
            let oifs: Vec<Option<String>> = vec![first(&cond.oif), None];
            // The original's own rules add flows, not values for the random ones (those stay
            // the same from one version of the sampler to the next).
            if !probe {
                addrs.extend(srcs.iter().chain(&dsts).copied());
                ports.extend(&dports);
                ifaces.extend([&cond.iif, &cond.oif].into_iter().flatten().flat_map(|l| l.split(',')).map(|i| Some(i.to_string())));
            }
            let origin = origin_of(c.kind);
            // ICMP rules: each of their types, and the next one, on the first source.
            if let (Some(types), Some(pr)) = (&cond.icmp_type, cond.proto.as_deref()) {
                let v6 = pr == "icmpv6";
                let proto = if v6 { L4::Icmpv6 } else { L4::Icmp };
                let src = srcs.iter().copied().find(|a| a.is_ipv6() == v6).unwrap_or(if v6 { IpAddr::V6(REMOTE6) } else { IpAddr::V4(REMOTE4) });
                let d = pick_dst(origin, src, &dsts);
                for t in fwc_compiler::read::units::parse_icmp_types(types, v6).unwrap_or_default() {
                    for t in [t, t.wrapping_add(1)] {
                        let mut f = flow(proto, src, 0, d, 0, origin, &iifs[0], &oifs[0]);
                        f.dport = u16::from(t);
                        push(f, &mut flows);
                    }
                }
            }
            // tcp flags: a first packet without SYN (an ACK: conntrack picks it up as `new`)
            // and one with the rule's own flags, besides the SYN of every tcp flow.
            if let Some(flags) = &cond.tcp_flags {
                let s = srcs[0];
                let d = pick_dst(origin, s, &dsts);
                for bits in [0x10, set_bits(flags)] {
                    let mut f = flow(L4::Tcp, s, sports[0], d, dports[0], origin, &iifs[0], &oifs[0]);
                    f.tcp_flags = bits;
                    push(f, &mut flows);
                }
            }
            // Packet types follow the destination: a broadcast and a multicast one.
            if cond.pkttype.is_some() {
                let s = srcs[0];
                let ds: [IpAddr; 2] = if s.is_ipv6() { [Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1).into(), Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2).into()] } else { [Ipv4Addr::BROADCAST.into(), Ipv4Addr::new(224, 0, 0, 1).into()] };
                for d in ds {
                    for proto in [L4::Udp, L4::Icmp] {
                        push(flow(proto, s, sports[0], d, dports[0], origin, &iifs[0], &oifs[0]), &mut flows);
                    }
                }
            }
            for proto in &protos {
                for &s in &srcs {
                    let d = pick_dst(origin, s, &dsts);
                    for &dp in &dports {
                        push(flow(*proto, s, sports[0], d, dp, origin, &iifs[0], &oifs[0]), &mut flows);
                    }
                    for &sp in &sports[1..] {
                        push(flow(*proto, s, sp, d, dports[0], origin, &iifs[0], &oifs[0]), &mut flows);
                    }
                    push(flow(*proto, s, sports[0], d, dports[0], origin, &iifs[1], &oifs[1]), &mut flows);
                }
                for &d in &dsts {
                    let s = if d.is_ipv4() { IpAddr::V4(REMOTE4) } else { IpAddr::V6(REMOTE6) };
                    push(flow(*proto, s, sports[0], fix_dst(origin, d), dports[0], origin, &iifs[0], &oifs[0]), &mut flows);
                }
            }
        }
    }
    for f in &imp.forwards {
        if let Some((_, p)) = f.listen.rsplit_once(':') {
            ports.extend(port_bounds(p));
        }
    }
    // Forwards: their listen ports from everywhere, both families.
    for f in &imp.forwards {
        let Some((addr, p)) = f.listen.rsplit_once(':') else { continue };
        let addr = addr.trim_matches(['[', ']']);
        for v6 in [false, true] {
            let d: IpAddr = match addr.parse::<IpAddr>() {
                Ok(a) => a,
                Err(_) => if v6 { LOCAL6.into() } else { LOCAL4.into() },
            };
            if d.is_ipv6() != v6 {
                continue;
            }
            let s: IpAddr = if v6 { REMOTE6.into() } else { REMOTE4.into() };
            // Without a listen address the original's DNAT also rewrites what is routed
            // through to another host on the forward's input interfaces: sampled too.
            let routed: IpAddr = if v6 { ROUTED6.into() } else { ROUTED4.into() };
            let iifs: Vec<Option<String>> = match &f.iif {
                Some(l) => l.split(',').map(|i| Some(i.trim().to_string())).collect(),
                None => vec![None],
            };
            for dp in port_bounds(p) {
                for proto in [L4::Tcp, L4::Udp] {
                    push(flow(proto, s, 40000, d, dp, Origin::Input, &None, &None), &mut flows);
                    if addr.is_empty() {
                        for iif in &iifs {
                            push(flow(proto, s, 40000, routed, dp, Origin::Forward, iif, &None), &mut flows);
                        }
                    }
                }
            }
        }
    }
    // Seeded random flows over the interesting values and a few others.
    let mut rng = Rng(seed | 1);
    let kinds: Vec<&str> = if kinds.is_empty() { vec!["input"] } else { kinds };
    ifaces.sort();
    ifaces.dedup();
    ifaces.retain(|i| i.as_deref() != Some("lo"));
    for _ in 0..random {
        let origin = origin_of(rng.pick::<&str>(&kinds));
        let v6 = rng.next().is_multiple_of(2);
        let proto = *rng.pick(&[L4::Tcp, L4::Tcp, L4::Udp, if v6 { L4::Icmpv6 } else { L4::Icmp }]);
        let fam: Vec<IpAddr> = addrs.iter().copied().filter(|a| a.is_ipv6() == v6).collect();
        let s = if fam.is_empty() || rng.next().is_multiple_of(4) { random_addr(&mut rng, v6) } else { *rng.pick(&fam) };
        let d = if rng.next().is_multiple_of(3) && !fam.is_empty() { fix_dst(origin, *rng.pick(&fam)) } else { pick_dst(origin, s, &[]) };
        let dp = if rng.next().is_multiple_of(4) { (rng.next() % 65535) as u16 + 1 } else { *rng.pick(&ports) };
        let iif = rng.pick(&ifaces).clone();
        let oif = rng.pick(&ifaces).clone();
        push(flow(proto, s, 1024 + (rng.next() % 60000) as u16, d, dp, origin, &iif, &oif), &mut flows);
    }
    flows
}

fn random_addr(rng: &mut Rng, v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(0x2001_0db8_u128 << 96 | u128::from(rng.next())))
    } else {
        IpAddr::V4(Ipv4Addr::from(0xC612_0000 | (rng.next() as u32 & 0x0001_ffff)))
    }
}

/// A destination of the right kind: this host (input), elsewhere (forward, output).
fn pick_dst(origin: Origin, s: IpAddr, dsts: &[IpAddr]) -> IpAddr {
    if let Some(d) = dsts.iter().find(|d| d.is_ipv4() == s.is_ipv4()) {
        return fix_dst(origin, *d);
    }
    match (origin, s.is_ipv6()) {
        (Origin::Input, false) => LOCAL4.into(),
        (Origin::Input, true) => LOCAL6.into(),
        (_, false) => ROUTED4.into(),
        (_, true) => ROUTED6.into(),
    }
}

fn fix_dst(_origin: Origin, d: IpAddr) -> IpAddr {
    d
}

#[allow(clippy::too_many_arguments)]
fn flow(proto: L4, s: IpAddr, sport: u16, d: IpAddr, dport: u16, origin: Origin, iif: &Option<String>, oif: &Option<String>) -> Flow {
    let proto = match (proto, s.is_ipv6()) {
        (L4::Icmp, true) => L4::Icmpv6,
        (L4::Icmpv6, false) => L4::Icmp,
        (p, _) => p,
    };
    let (saddr, iif) = match origin {
        Origin::Output => (if d.is_ipv6() { LOCAL6.into() } else { LOCAL4.into() }, None),
        _ => (s, iif.clone().filter(|i| i != "lo")),
    };
    let oif = match origin {
        Origin::Input => None,
        _ => oif.clone().filter(|i| i != "lo"),
    };
    let ports = proto.has_ports();
    Flow {
        proto,
        saddr,
        sport: if ports { sport.max(1) } else { 0 },
        daddr: d,
        dport: if ports { dport.max(1) } else if proto == L4::Icmp { 8 } else { 128 },
        origin,
        iif,
        oif,
        tcp_flags: if proto == L4::Tcp { 0x02 } else { 0 },
        icmp_code: 0,
        back: Default::default(),
    }
}

fn endpoint(a: IpAddr, port: Option<u16>) -> String {
    match (a, port) {
        (IpAddr::V6(a), Some(p)) => format!("[{a}]:{p}"),
        (a, Some(p)) => format!("{a}:{p}"),
        (a, None) => a.to_string(),
    }
}

/// `tests/imported.kdl`: one expectation per flow, with what the original did.
pub fn tests_file(source: &str, results: &[(Flow, Outcome)]) -> String {
    let mut t = format!(
        "// What the original firewall ({source}) does to {} flows, evaluated by fwc's evaluator on its\n// nftables JSON when it was imported. `fwc test` holds the imported rules to it.\n",
        results.len()
    );
    for (i, (f, o)) in results.iter().enumerate() {
        let ports = f.proto.has_ports();
        let mut p = vec![format!("expect {} {}", q(&format!("imported-{}", i + 1)), o.verdict.as_str())];
        p.push(format!("proto={}", f.proto.as_str()));
        if f.origin != Origin::Output {
            p.push(format!("from={}", q(&endpoint(f.saddr, ports.then_some(f.sport)))));
        }
        p.push(format!("to={}", q(&endpoint(f.daddr, ports.then_some(f.dport)))));
        let default_type = if f.proto == L4::Icmp { 8 } else { 128 };
        if !ports && f.dport != default_type {
            p.push(format!("icmp-type={}", q(&f.dport.to_string())));
        }
        if f.icmp_code != 0 {
            p.push(format!("icmp-code={}", q(&f.icmp_code.to_string())));
        }
        // A tcp flow's flags when they are not the SYN of a connection's first packet.
        if f.proto == L4::Tcp && f.tcp_flags != 0x02 {
            let names: Vec<&str> = TCP_FLAGS.iter().enumerate().filter(|(i, _)| f.tcp_flags & (1 << i) != 0).map(|(_, n)| *n).collect();
            p.push(format!("tcp-flags={}", q(&if names.is_empty() { "none".to_string() } else { names.join(",") })));
        }
        if let Some(i) = &f.iif {
            p.push(format!("in={}", q(i)));
        }
        if let Some(o) = &f.oif {
            p.push(format!("out={}", q(o)));
        }
        if f.origin != Origin::Input {
            p.push(format!("chain={}", f.origin.as_str()));
        }
        t.push_str(&format!("// original: {}\n", o.by.replace('\n', " ")));
        t.push_str(&p.join(" "));
        t.push('\n');
    }
    t
}

/// One flow on which the two sides disagree.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Difference {
    pub flow: String,
    pub original: String,
    pub imported: String,
}

/// Evaluate every flow on both sides.
pub fn compare(original: &Evaluator, imported: &Evaluator, flows: &[Flow]) -> Result<Vec<Difference>, fwc_compiler::eval::EvalError> {
    let mut out = Vec::new();
    for f in flows {
        let a = outcome(&original.explain(f)?);
        let b = outcome(&imported.explain(f)?);
        // Where a dropped packet was DNATed to does not matter; where an accepted one goes does.
        if a.verdict != b.verdict || (a.verdict == Verdict::Accept && a.dnat != b.dnat) {
            let show = |o: &Outcome| {
                let dnat = o.dnat.map(|(a, p)| format!(" (dnat to {})", endpoint(a, Some(p)))).unwrap_or_default();
                format!("{}{dnat}, decided by {}", o.verdict.as_str(), o.by)
            };
            out.push(Difference { flow: f.to_string(), original: show(&a), imported: show(&b) });
        }
    }
    Ok(out)
}

/// The flags fwc's `tcp-flags=` value says are set (`syn,ack/…` -> 0x12; `none` -> 0).
fn set_bits(flags: &str) -> u8 {
    let set = flags.trim_start_matches('!').split('/').next().unwrap_or_default();
    set.split(',').filter_map(|f| TCP_FLAGS.iter().position(|n| *n == f)).fold(0, |acc, i| acc | 1 << i)
}
