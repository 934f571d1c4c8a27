//! `manifest.json`: host, commit, and for every rule the backend(s) it went to, why, a one
//! line summary and a digest of its compiled definition (what `fwc plan` diffs), plus the
//! content hash of each other artifact.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::artifacts::*;
use crate::model::*;
use crate::place::select::HostPlan;
use crate::read::source::SourceMap;

/// The manifest of `plan`; `nftables_sha256` is the digest of the `nftables.json` written for
/// it (computed once, where the file's bytes were written or kept).
pub fn emit(plan: &HostPlan, map: &SourceMap, commit: Option<&str>, nftables_sha256: &str, qos: &QosArtifact, forward: &ForwardArtifact) -> Manifest {
    streamed(plan, map, commit, nftables_sha256, qos, forward).collect()
}

/// The manifest of `plan` before its rules are made: serialised (`manifest.json`), it makes
/// each rule as it is written, so the rules of a big repository are never held together;
/// [`Streamed::collect`] makes the [`Manifest`] value. Both give the same bytes.
pub fn streamed<'p>(plan: &'p HostPlan<'p>, map: &'p SourceMap, commit: Option<&str>, nftables_sha256: &str, qos: &QosArtifact, forward: &ForwardArtifact) -> Streamed<'p> {
    let mut artifact_hashes = BTreeMap::new();
    artifact_hashes.insert(NFTABLES_FILE.to_string(), nftables_sha256.to_string());
    artifact_hashes.insert(QOS_FILE.to_string(), sha256_pretty(qos));
    artifact_hashes.insert(FORWARD_FILE.to_string(), sha256_pretty(forward));
    Streamed { plan, map, commit: commit.map(str::to_string), artifact_hashes, setup: setup(plan, qos), valid_until: None }
}

/// A manifest whose rules are made from the plan when they are serialised (see [`streamed`]).
pub struct Streamed<'p> {
    plan: &'p HostPlan<'p>,
    map: &'p SourceMap,
    commit: Option<String>,
    artifact_hashes: BTreeMap<String, String>,
    setup: HostSetup,
    /// [`Manifest::valid_until`].
    pub valid_until: Option<String>,
}

impl Streamed<'_> {
    /// The host the manifest is for.
    pub fn host(&self) -> &str {
        &self.plan.host.name.value
    }

    /// How many rules the manifest lists.
    pub fn rule_count(&self) -> usize {
        self.plan.placements.len()
    }

    /// The manifest as a value, its rules made and held.
    pub fn collect(self) -> Manifest {
        Manifest {
            version: ARTIFACT_VERSION,
            host: self.host().to_string(),
            commit: self.commit.clone(),
            rules: rules(self.plan, self.map).collect(),
            artifact_hashes: self.artifact_hashes,
            setup: self.setup,
            valid_until: self.valid_until,
        }
    }
}

/// Serialised as [`Manifest`] is (the same fields in the same order), `rules` made one by one.
impl Serialize for Streamed<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        /// The rules, made while they are serialised.
        struct Rules<'a, 'p>(&'a Streamed<'p>);
        impl Serialize for Rules<'_, '_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_seq(rules(self.0.plan, self.0.map))
            }
        }
        let mut st = s.serialize_struct("Manifest", 7)?;
        st.serialize_field("version", &ARTIFACT_VERSION)?;
        st.serialize_field("host", self.host())?;
        st.serialize_field("commit", &self.commit)?;
        st.serialize_field("rules", &Rules(self))?;
        st.serialize_field("artifact_hashes", &self.artifact_hashes)?;
        st.serialize_field("setup", &self.setup)?;
        match &self.valid_until {
            Some(v) => st.serialize_field("valid_until", v)?,
            None => st.skip_field("valid_until")?,
        }
        st.end()
    }
}

/// The manifest's rules, in the plan's placement order (kind, name), each made when asked for.
fn rules<'p>(plan: &'p HostPlan<'p>, map: &'p SourceMap) -> impl Iterator<Item = ManifestRule> + 'p {
    let mut positions = crate::diag::Positions::new(map);
    let mut at = move |span: Span| {
        let l = positions.locate(span);
        Some(format!("{}:{}:{}", l.file, l.line, l.column))
    };
    let filters: BTreeMap<&str, &FilterRule> = plan.chains.iter().flat_map(|c| &c.rules).map(|r| (r.name.value.as_str(), *r)).collect();
    let forwards: BTreeMap<&str, &ForwardRule> =
        plan.kernel_forwards.iter().chain(&plan.userspace_forwards).map(|f| (f.name.value.as_str(), *f)).collect();
    let shapes: BTreeMap<&str, &ShapeRule> = plan.shapes.iter().map(|s| (s.name.value.as_str(), *s)).collect();
    plan.placements.iter().map(move |p| {
        let name = p.name.as_str();
        let (summary, digest, source) = match p.kind {
            RuleKind::Set => {
                let s = plan.set(name).expect("placed sets exist");
                let digest = match s.dynamic {
                    // Its declaration is all fwc owns of a dynamic set.
                    Some(d) => digest(&("dynamic", d)),
                    None => match &s.from_file {
                        Some(facts) => facts.digest.clone(),
                        None => set_digest(&s.elements),
                    },
                };
                (set_summary(s), digest, at(s.span))
            }
            RuleKind::Chain => {
                let c = plan.chains.iter().find(|c| c.kind.as_str() == name).expect("placed chains exist");
                let order: Vec<&str> = c.rules.iter().map(|r| r.name.value.as_str()).collect();
                // reject-with joins the digest only when given (digests of other chains stay).
                let d = match (c.reject_with, &c.router_advertisements) {
                    (None, None) => digest(&(c.policy, &order)),
                    (Some(w), None) => digest(&(c.policy, &order, w)),
                    (w, Some(ra)) => digest(&(c.policy, &order, w, ra)),
                };
                let mut summary = chain_summary(c.policy, c.reject_with, &order);
                if let Some(ra) = &c.router_advertisements {
                    summary.push_str(&format!("; router advertisements accepted on {}", if ra.is_empty() { "no interface (the rules decide)".to_string() } else { ra.join(",") }));
                }
                (summary, d, c.policy_span.and_then(&mut at))
            }
            RuleKind::Filter => (filter_summary(filters[name]), digest(filters[name]), at(filters[name].span)),
            RuleKind::Forward => (forward_summary(forwards[name]), digest(forwards[name]), at(forwards[name].span)),
            RuleKind::Shape => (shape_summary(shapes[name]), digest(shapes[name]), at(shapes[name].span)),
            RuleKind::Masquerade | RuleKind::Snat => {
                let s = plan.snats.iter().find(|s| s.kind.rule_kind() == p.kind && s.name.value == name).expect("placed snats exist");
                (snat_summary(s), digest(s), at(s.span))
            }
        };
        ManifestRule {
            kind: p.kind,
            name: p.name.clone(),
            chain: p.chain.map(|c| c.as_str().to_string()),
            backends: p.backends.clone(),
            reason: p.reason.clone(),
            summary,
            digest,
            source,
        }
    })
}

/// What the host needs beside the rulesets: forwarding for kernel forwards to other hosts (per
/// address family used), `route_localnet` for kernel forwards to 127.0.0.0/8, and the
/// interfaces QoS classes are attached to.
fn setup(plan: &HostPlan, qos: &QosArtifact) -> HostSetup {
    let targets: Vec<std::net::IpAddr> = plan
        .kernel_forwards
        .iter()
        .flat_map(|f| &f.targets.value)
        .filter_map(|t| match t.host {
            TargetHost::Ip(ip) => Some(ip),
            TargetHost::Dns(_) => None,
        })
        .collect();
    // A DNS-named kernel forward may DNAT to any address of its family: count it as remote.
    let dns_fams: Vec<u8> = plan.kernel_forwards.iter().filter_map(|f| crate::emit::nft::kernel_dns(f)).map(|d| d.family).collect();
    let remote = |v6: bool| {
        dns_fams.contains(&if v6 { 6 } else { 4 }) || targets.iter().any(|a| a.is_ipv6() == v6 && !a.is_loopback() && !a.is_unspecified())
    };
    let mut sysctls = Vec::new();
    if remote(false) {
        sysctls.push(SysctlSetting::ipv4_forwarding());
    }
    if remote(true) {
        sysctls.push(SysctlSetting::ipv6_forwarding());
    }
    if targets.iter().any(|a| a.is_ipv4() && a.is_loopback()) {
        sysctls.push(SysctlSetting::route_localnet());
    }
    let interfaces: std::collections::BTreeSet<&String> = qos.classes.iter().flat_map(|c| &c.interfaces).collect();
    // Quotas are counted by kernel quota objects, for userspace forwards too (by port).
    let mut quotas: Vec<_> =
        plan.kernel_forwards.iter().chain(&plan.userspace_forwards).filter_map(|f| crate::features::quota::forward_policy(f, BackendKind::Nftables)).collect();
    quotas.extend(plan.shapes.iter().filter_map(|s| crate::features::quota::shape_policy(s)));
    quotas.sort_by(|a, b| (a.kind, &a.rule).cmp(&(b.kind, &b.rule)));
    HostSetup { sysctls, interfaces: interfaces.into_iter().cloned().collect(), quotas }
}

/// Serializes the items of an iterator as a JSON array: what [`set_digest`] hashes.
#[cfg(test)]
struct SerializeIter<I>(I);

#[cfg(test)]
impl<I: Iterator<Item = T> + Clone, T: Serialize> Serialize for SerializeIter<I> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.clone())
    }
}

/// The first 16 hex digits of the sha256 of `v`'s compact JSON (`sha256_compact(v)[..16]`),
/// serialised into a buffer kept per thread: a rule is a few hundred bytes, and a fresh 4 KiB
/// hashing buffer, a 64-digit hex string and its copy per rule showed in the profile.
fn digest<T: Serialize>(v: &T) -> String {
    use sha2::{Digest, Sha256};
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    SCRATCH.with_borrow_mut(|buf| {
        buf.clear();
        serde_json::to_writer(&mut *buf, v).expect("rules serialize");
        let d = hex::encode(&Sha256::digest(buf.as_slice())[..8]);
        if buf.capacity() > 1 << 20 {
            *buf = Vec::new();
        }
        d
    })
}

/// The digest of a static set's elements: `digest(&SerializeIter(elements))`, the same bytes
/// (`[{"Net":"192.0.2.0/24"},{"Range":["10.0.0.1","10.0.0.9"]},…]`) written straight into
/// the hash in blocks: a million elements through serde and `Display` were 35 % of compiling
/// a million-element set file.
/// The manifest digest of a static set's elements (in their order).
pub(crate) fn set_digest(elems: &[Spanned<AddrElem>]) -> String {
    use crate::emit::addrtext::push_addr;
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 16);
    buf.push(b'[');
    for (i, e) in elems.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        match e.value {
            AddrElem::Net(n) => {
                buf.extend_from_slice(b"{\"Net\":\"");
                push_addr(&mut buf, n.addr());
                buf.push(b'/');
                let len = n.prefix_len();
                if len >= 100 {
                    buf.push(b'0' + len / 100);
                }
                if len >= 10 {
                    buf.push(b'0' + len / 10 % 10);
                }
                buf.push(b'0' + len % 10);
                buf.extend_from_slice(b"\"}");
            }
            AddrElem::Range(a, b) => {
                buf.extend_from_slice(b"{\"Range\":[\"");
                push_addr(&mut buf, a);
                buf.extend_from_slice(b"\",\"");
                push_addr(&mut buf, b);
                buf.extend_from_slice(b"\"]}");
            }
        }
        if buf.len() > (1 << 16) - 128 {
            h.update(&buf);
            buf.clear();
        }
    }
    buf.push(b']');
    h.update(&buf);
    hex::encode(h.finalize())[..16].to_string()
}

fn addr(m: &AddrMatch) -> String {
    match m {
        AddrMatch::Set(s) => format!("@{s}"),
        AddrMatch::Literal(l) => l.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
    }
}

fn ports(p: &[PortRange]) -> String {
    p.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")
}

fn chain_summary(policy: Policy, reject_with: Option<RejectWith>, order: &[&str]) -> String {
    let policy = match reject_with {
        Some(w) => format!("{} with {}", policy.as_str(), w.as_str()),
        None => policy.as_str().to_string(),
    };
    let shown: Vec<&str> = order.iter().take(8).copied().collect();
    let more = order.len().saturating_sub(8);
    let mut out = format!("policy {policy}, {} rule(s)", order.len());
    if !shown.is_empty() {
        out.push_str(&format!(" in order: {}", shown.join(", ")));
    }
    if more > 0 {
        out.push_str(&format!(", … {more} more"));
    }
    out
}

fn set_summary(s: &AddrSet) -> String {
    if let Some(d) = s.dynamic {
        let mut out = "dynamic (filled at run time by other programs)".to_string();
        if let Some(t) = d.timeout_s {
            out.push_str(&format!(", timeout {t}s"));
        }
        if let Some(n) = d.size {
            out.push_str(&format!(", size {n}"));
        }
        return out;
    }
    if s.elements.is_empty() {
        return "empty".into();
    }
    let shown: Vec<String> = s.elements.iter().take(4).map(|e| e.value.to_string()).collect();
    let more = s.elements.len().saturating_sub(4);
    let mut out = format!("{} element(s): {}", s.elements.len(), shown.join(", "));
    if more > 0 {
        out.push_str(&format!(", … {more} more"));
    }
    out
}

/// The match properties rules share, in summary words: ` tcp port 22 from @office …`.
struct Matches<'r> {
    proto: &'r Option<Spanned<Proto>>,
    ports: &'r Option<Spanned<Vec<PortRange>>>,
    sports: &'r Option<Spanned<Vec<PortRange>>>,
    from: &'r Option<Spanned<AddrMatch>>,
    to: &'r Option<Spanned<AddrMatch>>,
    iif: Option<String>,
    oif: Option<String>,
    negate: crate::model::header::Negations,
}

impl Matches<'_> {
    fn push(&self, out: &mut String) {
        if let Some(p) = self.proto {
            out.push_str(&format!(" {}", p.value.as_str()));
        }
        let not = |negated: bool| if negated { "!" } else { "" };
        let n = &self.negate;
        for (word, p, negated) in [("port", self.ports, n.ports), ("sport", self.sports, n.sports)] {
            if let Some(p) = p {
                out.push_str(&format!(" {word} {}{}", not(negated), ports(&p.value)));
            }
        }
        for (word, m, negated) in [("from", self.from, n.from), ("to", self.to, n.to)] {
            if let Some(m) = m {
                out.push_str(&format!(" {word} {}{}", not(negated), addr(&m.value)));
            }
        }
        for (word, i, negated) in [("in", &self.iif, n.iif), ("out", &self.oif, n.oif)] {
            if let Some(i) = i {
                out.push_str(&format!(" {word} {}{i}", not(negated)));
            }
        }
    }
}

fn filter_summary(r: &FilterRule) -> String {
    let mut out = format!("{} {}", r.chain.as_str(), r.action.as_str());
    let ifs = |i: &Option<Spanned<Vec<String>>>| i.as_ref().map(|i| i.value.join(","));
    Matches { proto: &r.proto, ports: &r.ports, sports: &r.sports, from: &r.from, to: &r.to, iif: ifs(&r.iif), oif: ifs(&r.oif), negate: r.negate }.push(&mut out);
    let v6 = r.proto.as_ref().is_some_and(|p| p.value == Proto::Icmpv6);
    if let Some(t) = &r.icmp_types {
        let names: Vec<String> = t.value.iter().map(|&c| crate::read::units::icmp_type_name(v6, c).map_or(c.to_string(), str::to_string)).collect();
        out.push_str(&format!(" icmp-type {}", names.join(",")));
    }
    if let Some(c) = &r.icmp_codes {
        let names: Vec<String> = c.value.iter().map(|&c| crate::features::headers::icmp_code_name_of(v6, r.icmp_types.as_ref().and_then(|t| t.value.first().copied()), c).map_or(c.to_string(), str::to_string)).collect();
        out.push_str(&format!(" icmp-code {}", names.join(",")));
    }
    if let Some(f) = &r.tcp_flags {
        out.push_str(&format!(" tcp-flags {}", f.value));
    }
    if let Some(p) = &r.pkttypes {
        out.push_str(&format!(" pkttype {}", p.value.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(",")));
    }
    if let Some(st) = &r.state {
        out.push_str(&format!(" state {}", st.value.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(",")));
    }
    if let Some(rp) = &r.rpfilter {
        out.push_str(&format!(" rpfilter {}", rp.value.as_str()));
    }
    if r.action == Action::ClampMss {
        out.push_str(&r.mss.as_ref().map_or(" mss route-mtu".to_string(), |m| format!(" mss {}", m.value)));
    }
    if let Some(rate) = &r.rate {
        out.push_str(&format!(" rate {}", rate.value));
    }
    if let Some(w) = &r.reject_with {
        out.push_str(&format!(" with {}", w.value.as_str()));
    }
    if r.log && r.action != Action::Log {
        out.push_str(" log");
    }
    if let Some(p) = &r.log_prefix {
        out.push_str(&format!(" log-prefix {:?}", p.value));
    }
    if let Some(lr) = &r.log_rate {
        out.push_str(&format!(" log-rate {}", lr.value));
    }
    if let Some(p) = &r.per_source {
        out.push_str(&crate::features::persource::summary(p));
    }
    if let Some(s) = &r.schedule {
        out.push_str(&crate::features::schedule::summary(s));
    }
    comment(&mut out, &r.comment);
    out
}

fn snat_summary(r: &SnatRule) -> String {
    let mut out = r.kind.as_str().to_string();
    let iif = r.iif.as_ref().map(|i| i.value.join(","));
    Matches { proto: &r.proto, ports: &r.ports, sports: &None, from: &r.from, to: &r.dst, iif, oif: r.oif.as_ref().map(|o| o.value.clone()), negate: r.negate }.push(&mut out);
    if let Some(m) = &r.from_except {
        out.push_str(&format!(" from-except {}", addr(&m.value)));
    }
    if let Some(a) = &r.to_addr {
        out.push_str(&format!(" -> source {}", a.value));
    }
    comment(&mut out, &r.comment);
    out
}

fn comment(out: &mut String, c: &Option<String>) {
    if let Some(c) = c {
        out.push_str(&format!(" # {c}"));
    }
}

/// Bytes, the way operators write sizes: `2MiB`, `256KiB`, `1500B`.
pub fn size(b: u64) -> String {
    match b {
        0 => "0B".into(),
        _ if b.is_multiple_of(1 << 30) => format!("{}GiB", b >> 30),
        _ if b.is_multiple_of(1 << 20) => format!("{}MiB", b >> 20),
        _ if b.is_multiple_of(1024) => format!("{}KiB", b >> 10),
        _ => format!("{b}B"),
    }
}

/// Milliseconds, the way operators write durations: `10m`, `30s`, `1500ms`.
pub fn duration(ms: u64) -> String {
    match ms {
        _ if ms.is_multiple_of(86_400_000) => format!("{}d", ms / 86_400_000),
        _ if ms.is_multiple_of(3_600_000) => format!("{}h", ms / 3_600_000),
        _ if ms.is_multiple_of(60_000) => format!("{}m", ms / 60_000),
        _ if ms.is_multiple_of(1000) => format!("{}s", ms / 1000),
        _ => format!("{ms}ms"),
    }
}

fn forward_summary(f: &ForwardRule) -> String {
    let listen = match f.listen.addr {
        Some(std::net::IpAddr::V6(a)) => format!("[{a}]:{}", f.listen.ports),
        Some(a) => format!("{a}:{}", f.listen.ports),
        None => format!(":{}", f.listen.ports),
    };
    let targets: Vec<String> = f.targets.value.iter().map(ToString::to_string).collect();
    let mut out = format!("{} {listen} -> {}", f.proto.as_str(), targets.join(","));
    if let Some(s) = &f.sni {
        out = format!("{} {listen} sni {} -> {}", f.proto.as_str(), s.value, targets.join(","));
    }
    if let Some(i) = &f.iif {
        out.push_str(&format!(" in {}", i.value.join(",")));
    }
    if f.any_destination {
        out.push_str(" any destination");
    }
    if let Some(m) = &f.from {
        out.push_str(&format!(" from {}", addr(&m.value)));
    }
    match (&f.up, &f.down) {
        (Some(u), Some(d)) if u.value == d.value => out.push_str(&format!(" bandwidth {}", rate(u.value))),
        (u, d) => {
            if let Some(u) = u {
                out.push_str(&format!(" up {}", rate(u.value)));
            }
            if let Some(d) = d {
                out.push_str(&format!(" down {}", rate(d.value)));
            }
        }
    }
    if let Some(m) = &f.max_conns {
        out.push_str(&format!(" max-conns {}", m.value));
    }
    if let Some(r) = &f.conn_rate {
        out.push_str(&format!(" conn-rate {}", r.value));
    }
    if let Some(p) = &f.proxy_protocol {
        out.push_str(&format!(" proxy-protocol v{}", p.value));
    }
    if let Some(b) = &f.burst {
        out.push_str(&format!(" burst {}", size(b.value)));
    }
    if let Some(t) = &f.idle_timeout_ms {
        out.push_str(&format!(" idle-timeout {}", duration(t.value)));
    }
    if let Some(h) = &f.health {
        out.push_str(&format!(
            " health-check tcp every {} timeout {} rise {} fall {}",
            duration(h.interval_ms),
            duration(h.timeout_ms),
            h.rise,
            h.fall
        ));
    }
    if let Some(p) = &f.per_source {
        out.push_str(&crate::features::persource::summary(p));
    }
    if let Some(s) = &f.schedule {
        out.push_str(&crate::features::schedule::summary(s));
    }
    if let Some(q) = &f.quota {
        out.push_str(&format!(" {}", crate::features::quota::describe(&q.value)));
    }
    comment(&mut out, &f.comment);
    out
}

fn shape_summary(s: &ShapeRule) -> String {
    let mut out = rate(s.rate.value);
    if let Some(m) = &s.from {
        out.push_str(&format!(" from {}", addr(&m.value)));
    }
    if let Some(m) = &s.to {
        out.push_str(&format!(" to {}", addr(&m.value)));
    }
    if let Some(p) = &s.proto {
        out.push_str(&format!(" {}", p.value.as_str()));
    }
    if let Some(p) = &s.ports {
        out.push_str(&format!(" port {}", ports(&p.value)));
    }
    if let Some(b) = &s.burst {
        out.push_str(&format!(" burst {}", size(b.value)));
    }
    if !s.devs.is_empty() {
        out.push_str(&format!(" dev {}", s.devs.iter().map(|d| d.value.as_str()).collect::<Vec<_>>().join(",")));
    }
    if s.direction == Direction::Ingress {
        out.push_str(" direction ingress");
    }
    if let Some(q) = &s.quota {
        out.push_str(&format!(" {}", crate::features::quota::describe(&q.value)));
    }
    comment(&mut out, &s.comment);
    out
}

/// Bytes per second, the way operators write them: bits (`100mbit`) unless the value is a
/// whole number of binary bytes per second and not of kilobits (`1MiB/s`).
pub fn rate(b: Bandwidth) -> String {
    if !(b.0 * 8).is_multiple_of(1000) && b.0.is_multiple_of(1024) {
        return format!("{}/s", size(b.0));
    }
    let bits = b.0 as f64 * 8.0;
    let (v, unit) = if bits >= 1e9 {
        (bits / 1e9, "gbit")
    } else if bits >= 1e6 {
        (bits / 1e6, "mbit")
    } else if bits >= 1e3 {
        (bits / 1e3, "kbit")
    } else {
        (bits, "bit")
    };
    let s = format!("{v:.3}");
    format!("{}{unit}", s.trim_end_matches('0').trim_end_matches('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_digest_is_the_serde_digest() {
        let span = Span { file: 0, offset: 0, len: 0 };
        let texts = ["192.0.2.7", "10.0.0.0/8", "0.0.0.0/0", "255.255.255.255", "2001:db8::/32", "::1", "10.0.0.1-10.0.0.9", "2001:db8::1-2001:db8::ff", "100.64.0.0/10"];
        let mut elems: Vec<Spanned<AddrElem>> = texts.iter().map(|t| Spanned::new(crate::read::units::parse_addr(t).unwrap(), span)).collect();
        let want = |e: &[Spanned<AddrElem>]| digest(&SerializeIter(e.iter().map(|e| e.value)));
        assert_eq!(set_digest(&elems), want(&elems));
        assert_eq!(set_digest(&[]), want(&[]));
        // Long enough to be hashed in several blocks.
        for i in 0..20_000u32 {
            elems.push(Spanned::new(AddrElem::Net(ipnet::IpNet::from(std::net::IpAddr::V4(std::net::Ipv4Addr::from(i.wrapping_mul(2_654_435_761))))), span));
        }
        assert_eq!(set_digest(&elems), want(&elems));
    }

    /// A rule's digest is the one manifests have always recorded (`sha256_compact`'s first 16
    /// digits): an applied generation's rules stay unchanged in the next plan.
    #[test]
    fn rule_digest_is_the_sha256_of_its_compact_json() {
        let big: Vec<String> = (0..300).map(|i| format!("rule {i}")).collect();
        for v in [serde_json::json!({"a": [1, "b"]}), serde_json::json!(big)] {
            assert_eq!(digest(&v), sha256_compact(&v)[..16]);
        }
    }
}
