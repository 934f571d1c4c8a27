//! Backend selection: which rules apply to a host, and which dataplane each one goes to, with
//! the reason a human reads in `fwc plan`. The whole decision lives in [`place_forward`]; the
//! result, a [`HostPlan`], is the only input the emitters read.

pub mod classes;

use std::collections::BTreeMap;

use crate::artifacts::{BackendKind, QosClass, QosDirection};
use crate::model::*;
use crate::place::setlayout::SetLayout;

/// Where a rule goes and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub kind: RuleKind,
    pub name: String,
    pub chain: Option<ChainKind>,
    pub backends: Vec<BackendKind>,
    pub reason: String,
}

/// One filter chain of one host, its rules already filtered by `on=`.
#[derive(Debug, Clone)]
pub struct ChainPlan<'a> {
    pub kind: ChainKind,
    pub policy: Policy,
    /// Where the policy was given (`None`: the default, accept).
    pub policy_span: Option<Span>,
    /// Only `containers`: the bridge interfaces (given, or [`DEFAULT_CONTAINER_BRIDGES`]).
    pub bridges: Vec<String>,
    /// `policy=reject`: how the final rule rejects (`reject-with=` of the chain block).
    pub reject_with: Option<RejectWith>,
    /// `input router-advertisements=`: the interfaces the built-in accepts router
    /// advertisements on (`Some([])`: none); `None`: every interface.
    pub router_advertisements: Option<Vec<String>>,
    pub rules: Vec<&'a FilterRule>,
}

/// Everything the emitters need for one host.
#[derive(Debug, Clone)]
pub struct HostPlan<'a> {
    pub host: &'a Host,
    /// Every set of the repository, in name order (sets have no `on=`; unused ones are emitted
    /// too so `nft list` shows them).
    pub sets: Vec<&'a AddrSet>,
    /// Always input, forward, output, in that order; then `containers` when the repository
    /// has a `containers` block.
    pub chains: Vec<ChainPlan<'a>>,
    /// Forwards to IP literals handled by nftables DNAT (sorted by name).
    pub kernel_forwards: Vec<&'a ForwardRule>,
    /// Forwards run by the userspace forwarder (sorted by name).
    pub userspace_forwards: Vec<&'a ForwardRule>,
    /// Shape rules for this host (sorted by name).
    pub shapes: Vec<&'a ShapeRule>,
    /// `masquerade` / `snat` rules for this host, in file order (first match wins).
    pub snats: Vec<&'a SnatRule>,
    /// QoS classes (kernel forwards with a cap, and shapes), sorted by id.
    pub qos_classes: Vec<QosClass>,
    /// Per rule: backend and reason (sorted by kind, name).
    pub placements: Vec<Placement>,
    /// The kernel layout of every static set (interval, or hash sets per prefix length;
    /// `crate::place::setlayout`), decided once from its elements.
    pub layouts: BTreeMap<&'a str, SetLayout>,
    /// Lookup indexes, so emitters stay linear in the number of rules.
    set_index: BTreeMap<&'a str, &'a AddrSet>,
    class_index: BTreeMap<(RuleKind, &'a str, QosDirection), usize>,
}

impl<'a> HostPlan<'a> {
    /// The container bridges: those of the `containers` block, else the defaults.
    pub fn container_bridges(&self) -> Vec<String> {
        match self.chains.iter().find(|c| c.kind == ChainKind::Containers) {
            Some(c) => c.bridges.clone(),
            None => DEFAULT_CONTAINER_BRIDGES.iter().map(|b| b.to_string()).collect(),
        }
    }

    /// The set named `name` (check has made sure it exists).
    pub fn set(&self, name: &str) -> Option<&'a AddrSet> {
        self.set_index.get(name).copied()
    }

    /// The QoS class of rule `rule` in direction `dir`, if the rule has one.
    pub fn qos_class(&self, kind: RuleKind, rule: &str, dir: QosDirection) -> Option<&QosClass> {
        self.class_index.get(&(kind, rule, dir)).map(|&i| &self.qos_classes[i])
    }
}

/// A TCP listen address that several forwards of one host share by `sni=`: the routes by TLS
/// server name and the fallback (the forward there without `sni=`, if any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SniListener<'a> {
    pub listen: Listen,
    /// (server name pattern, forward), exact names first, then wildcards, each in name order.
    pub routes: Vec<(&'a str, &'a str)>,
    pub fallback: Option<&'a str>,
}

impl SniListener<'_> {
    /// `tcp :443 by TLS server name: a.example.com -> web-a, *.example.com -> wild, anything
    /// else -> default` (what `fwc plan` shows for every forward of the listener).
    pub fn describe(&self) -> String {
        let addr = match self.listen.addr {
            Some(std::net::IpAddr::V6(a)) => format!("[{a}]"),
            Some(a) => a.to_string(),
            None => String::new(),
        };
        let routes: Vec<String> = self.routes.iter().map(|(p, r)| format!("{p} -> {r}")).collect();
        let rest = match self.fallback {
            Some(f) => format!("anything else -> {f}"),
            None => "anything else closed".into(),
        };
        format!("shared listener tcp {addr}:{} by TLS server name: {}, {rest}", self.listen.ports, routes.join(", "))
    }
}

/// The shared SNI listeners among `forwards` (those of one host), by the name of each forward
/// on one. A forward with `sni=` shares the listen address written exactly the same way
/// (single port); `check` reports everything else that overlaps.
pub fn sni_listeners<'a>(forwards: &[&'a ForwardRule]) -> BTreeMap<&'a str, SniListener<'a>> {
    let tcp = |f: &ForwardRule| f.proto != ForwardProto::Udp && f.listen.ports.is_single();
    let mut groups: BTreeMap<(Option<std::net::IpAddr>, u16), Vec<&'a ForwardRule>> = BTreeMap::new();
    for f in forwards.iter().filter(|f| f.sni.is_some() && tcp(f)) {
        groups.entry((f.listen.addr, f.listen.ports.lo)).or_default().push(f);
    }
    for f in forwards.iter().filter(|f| f.sni.is_none() && tcp(f)) {
        if let Some(g) = groups.get_mut(&(f.listen.addr, f.listen.ports.lo)) {
            g.push(f);
        }
    }
    let mut out = BTreeMap::new();
    for g in groups.into_values() {
        let mut routes: Vec<(&str, &str)> =
            g.iter().filter_map(|f| f.sni.as_ref().map(|s| (s.value.as_str(), f.name.value.as_str()))).collect();
        routes.sort_by_key(|(p, n)| (p.starts_with("*."), *p, *n));
        let l = SniListener { listen: g[0].listen.value, routes, fallback: g.iter().find(|f| f.sni.is_none()).map(|f| f.name.value.as_str()) };
        for f in &g {
            out.insert(f.name.value.as_str(), l.clone());
        }
    }
    out
}

/// [`sni_listeners`] over every host (checks and lints judge a rule for all hosts at once):
/// a forward that is on a shared listener on some host.
pub fn sni_listeners_any_host(rs: &Ruleset) -> BTreeMap<&str, SniListener<'_>> {
    let hosts: Vec<Host> = if rs.hosts.is_empty() { vec![implicit_host()] } else { rs.hosts.clone() };
    let mut out = BTreeMap::new();
    for h in &hosts {
        let fs: Vec<&ForwardRule> = rs.forwards.iter().filter(|f| f.on.as_ref().is_none_or(|s| s.value.matches(h))).collect();
        for (k, v) in sni_listeners(&fs) {
            out.entry(k).or_insert(v);
        }
    }
    out
}

/// Which dataplane a forward goes to, and why. This is the table in docs/design.md, in one place.
/// `shared`: the SNI listener the forward is on (see [`sni_listeners`]), if any.
pub fn place_forward(f: &ForwardRule, shared: Option<&SniListener>) -> (Vec<BackendKind>, String) {
    let dns = f.targets.value.iter().find_map(|t| match &t.host {
        TargetHost::Dns(n) => Some(n.clone()),
        TargetHost::Ip(_) => None,
    });
    let capped = f.up.is_some() || f.down.is_some();
    let userspace_reason = match &dns {
        _ if f.backend.value == BackendChoice::Userspace => Some("backend=\"userspace\" was asked for".to_string()),
        _ if f.sni.is_some() => Some("SNI routing needs userspace (the kernel cannot read the TLS ClientHello)".into()),
        _ if shared.is_some() => Some("the fallback of SNI routes needs userspace (the forwarder reads the TLS server name first)".into()),
        _ if f.proxy_protocol.is_some() => Some("PROXY protocol needs userspace (the kernel cannot add a header)".into()),
        _ if f.idle_timeout_ms.is_some() => Some("idle-timeout needs userspace".into()),
        // A DNS target alone goes to the kernel (the forwarder re-resolves the name); these
        // combinations are not built on the kernel path.
        Some(n) if n == "localhost" || n.ends_with(".localhost") => {
            Some(format!("DNS target {n} is loopback, which needs userspace (the kernel path DNATs to remote addresses)"))
        }
        Some(n) if f.targets.value.len() > 1 => {
            Some(format!("DNS target {n} among several targets needs userspace (the kernel path resolves one name per forward)"))
        }
        Some(n) if shifted_ports(f) => Some(format!("DNS target {n} with a shifted port range needs userspace (the kernel path keeps or fixes the port)")),
        // Before the kernel path had health checks these went to userspace; mixed families
        // would be an error on the kernel path, so they stay there.
        _ if f.health.is_some() && mixed_families(f) => {
            Some("health-check over IPv4 and IPv6 targets needs userspace (kernel DNAT balances within one family)".into())
        }
        _ => None,
    };
    match userspace_reason {
        Some(r) => (vec![BackendKind::Userspace], r),
        None if dns.is_some() => {
            let n = dns.unwrap_or_default();
            let fam = if f.listen.addr.is_some_and(|a| a.is_ipv6() && !a.is_unspecified()) { "AAAA" } else { "A" };
            let why = format!(
                "kernel, name re-resolved: DNS target {n} needs nothing else from userspace, so nftables DNATs to its {fam} records; the forwarder re-resolves the name (record TTLs, {}-{} s) and replaces the addresses in one nft transaction",
                fwc_artifacts::DNS_MIN_TTL_SECS,
                fwc_artifacts::DNS_MAX_TTL_SECS
            );
            if capped {
                (vec![BackendKind::Nftables, BackendKind::Qos], format!("{why}; the bandwidth cap is an eBPF token bucket on the marked flow"))
            } else {
                (vec![BackendKind::Nftables], why)
            }
        }
        None if capped && f.health.is_some() => (
            vec![BackendKind::Nftables, BackendKind::Qos],
            "IP-literal targets: nftables DNAT; health-checked: the forwarder probes the targets and rewrites the forward's dispatch chain when one goes down or comes back; the bandwidth cap is an eBPF token bucket on the marked flow".into(),
        ),
        None if f.health.is_some() => (
            vec![BackendKind::Nftables],
            "IP-literal targets: nftables DNAT + masquerade; health-checked: the forwarder probes the targets and rewrites the forward's dispatch chain when one goes down or comes back".into(),
        ),
        None if capped => (
            vec![BackendKind::Nftables, BackendKind::Qos],
            "IP-literal targets: nftables DNAT; the bandwidth cap is an eBPF token bucket on the marked flow".into(),
        ),
        None => (vec![BackendKind::Nftables], "IP-literal targets: nftables DNAT + masquerade (fastest path)".into()),
    }
}

/// Does a target map a listen port range onto another range (port = p - lo + to)?
fn shifted_ports(f: &ForwardRule) -> bool {
    let l = f.listen.value.ports;
    !l.is_single() && f.targets.value.iter().any(|t| t.ports.is_some_and(|r| !r.is_single() && r.lo != l.lo))
}

fn mixed_families(f: &ForwardRule) -> bool {
    let v4 = f.targets.value.iter().filter(|t| matches!(t.host, TargetHost::Ip(std::net::IpAddr::V4(_)))).count();
    v4 != 0 && v4 != f.targets.value.len()
}

/// The layout of every static set (`crate::place::setlayout`). A set used where one match must stay
/// one nft rule keeps the interval layout: a filter rule with `rate` (its limit is per rule),
/// a forward's `from=` (guards count per rule, round robin numbers per rule) and shapes.
fn set_layouts<'a>(
    sets: &[&'a AddrSet],
    chains: &[ChainPlan<'a>],
    kernel_forwards: &[&'a ForwardRule],
    userspace_forwards: &[&'a ForwardRule],
    shapes: &[&'a ShapeRule],
) -> BTreeMap<&'a str, SetLayout> {
    let mut one_rule: BTreeMap<&'a str, &'static str> = BTreeMap::new();
    let mut pin = |m: Option<&'a Spanned<AddrMatch>>, why: &'static str| {
        if let Some(AddrMatch::Set(name)) = m.map(|m| &m.value) {
            one_rule.entry(name.as_str()).or_insert(why);
        }
    };
    for r in chains.iter().flat_map(|c| &c.rules).filter(|r| r.rate.is_some()) {
        pin(r.from.as_ref(), "a rule with rate= uses it (one limit per rule)");
        pin(r.to.as_ref(), "a rule with rate= uses it (one limit per rule)");
    }
    for r in chains.iter().flat_map(|c| &c.rules).filter(|r| r.log_rate.is_some()) {
        pin(r.from.as_ref(), "a rule with log-rate= uses it (one log limit per rule)");
        pin(r.to.as_ref(), "a rule with log-rate= uses it (one log limit per rule)");
    }
    for f in kernel_forwards.iter().chain(userspace_forwards) {
        pin(f.from.as_ref(), "a forward's from= uses it (its guards and round robin are per rule)");
    }
    for sh in shapes {
        pin(sh.from.as_ref(), "a shape uses it");
        pin(sh.to.as_ref(), "a shape uses it");
    }
    sets.iter()
        .filter(|s| s.dynamic.is_none())
        .map(|s| {
            let name = s.name.value.as_str();
            let one_lookup = one_rule.get(name).copied();
            let layout = match &s.from_file {
                Some(facts) => SetLayout::of_merged(facts.merged.clone(), one_lookup),
                None => SetLayout::of(s.elements.iter().map(|e| &e.value), one_lookup),
            };
            (name, layout)
        })
        .collect()
}

/// Filter the ruleset for `host`, decide backends, and assign QoS classes.
pub fn plan_host<'a>(rs: &'a Ruleset, host: &'a Host) -> HostPlan<'a> {
    let applies = |on: &Option<Spanned<Selector>>| on.as_ref().is_none_or(|s| s.value.matches(host));
    let mut placements = Vec::new();

    let mut sets: Vec<&AddrSet> = rs.sets.iter().collect();
    sets.sort_by(|a, b| a.name.value.cmp(&b.name.value));
    for s in &sets {
        let reason = match s.dynamic {
            Some(_) => "named nftables set (interval + timeout, one per address family); its elements belong to other programs: applies keep them, drift ignores them",
            // Filled in below with the set's layout, once every rule using it is known.
            None => "",
        };
        placements.push(Placement {
            kind: RuleKind::Set,
            name: s.name.value.clone(),
            chain: None,
            backends: vec![BackendKind::Nftables],
            reason: reason.into(),
        });
    }

    let mut chains = Vec::new();
    let has = |k: ChainKind| rs.chains.iter().any(|c| c.kind == k);
    let kinds = [ChainKind::Prerouting, ChainKind::Input, ChainKind::Forward, ChainKind::Output, ChainKind::Containers];
    for kind in kinds.into_iter().filter(|k| !matches!(k, ChainKind::Containers | ChainKind::Prerouting) || has(*k)) {
        let mut policy = Policy::Accept;
        let mut policy_span = None;
        let mut reject_with = None;
        let mut router_advertisements = None;
        let mut bridges: Vec<String> = DEFAULT_CONTAINER_BRIDGES.iter().map(|b| b.to_string()).collect();
        let mut rules = Vec::new();
        for c in rs.chains.iter().filter(|c| c.kind == kind) {
            if let Some(p) = &c.policy {
                policy = p.value;
                policy_span = Some(p.span);
            }
            if let Some(r) = &c.reject_with {
                reject_with = Some(r.value);
            }
            if let Some(r) = &c.router_advertisements {
                router_advertisements = Some(r.value.clone());
            }
            if let Some(b) = &c.bridges {
                bridges = b.value.clone();
            }
            rules.extend(c.rules.iter().filter(|r| applies(&r.on)));
        }
        if kind != ChainKind::Containers {
            bridges.clear();
        }
        placements.push(Placement {
            kind: RuleKind::Chain,
            name: kind.as_str().to_string(),
            chain: Some(kind),
            backends: vec![BackendKind::Nftables],
            reason: if kind == ChainKind::Containers {
                "nftables chain at the forward hook before Docker's (priority -5): new connections DNATed into a container bridge, first match wins, then the policy".into()
            } else if kind == ChainKind::Prerouting {
                "nftables chain at the prerouting hook, before routing and DNAT (priority raw -300; mangle -150 when a rule matches state=): every packet, the first deny that matches drops it".into()
            } else {
                "nftables filter chain: first match wins, then the policy".into()
            },
        });
        for r in &rules {
            placements.push(Placement {
                kind: RuleKind::Filter,
                name: r.name.value.clone(),
                chain: Some(kind),
                backends: vec![BackendKind::Nftables],
                reason: "filter rule: nftables".into(),
            });
        }
        chains.push(ChainPlan { kind, policy, policy_span, bridges, reject_with, router_advertisements, rules });
    }

    let mut kernel_forwards = Vec::new();
    let mut userspace_forwards = Vec::new();
    let mut forwards: Vec<&ForwardRule> = rs.forwards.iter().filter(|f| applies(&f.on)).collect();
    forwards.sort_by(|a, b| a.name.value.cmp(&b.name.value));
    let shared = sni_listeners(&forwards);
    for f in forwards {
        let on = shared.get(f.name.value.as_str());
        let (backends, mut reason) = place_forward(f, on);
        if let Some(l) = on {
            reason = format!("{reason}; {}", l.describe());
        }
        if backends.contains(&BackendKind::Userspace) {
            userspace_forwards.push(f);
        } else {
            kernel_forwards.push(f);
        }
        // Which filter chain judges the forward's new connections (docs/rules.md, "Forwards and
        // the filter chains"): plan shows it with the backend.
        let (chain, reason) = match backends.contains(&BackendKind::Userspace) {
            true => (ChainKind::Input, format!("{reason}; new connections pass the input chain's rules first (a deny there stops them), then fwc accepts the listen port")),
            false => (ChainKind::Forward, format!("{reason}; new connections, DNATed, pass the forward chain's rules first (a deny there stops them), then fwc accepts them")),
        };
        placements.push(Placement { kind: RuleKind::Forward, name: f.name.value.clone(), chain: Some(chain), backends, reason });
    }

    let mut shapes: Vec<&ShapeRule> = rs.shapes.iter().filter(|s| applies(&s.on)).collect();
    shapes.sort_by(|a, b| a.name.value.cmp(&b.name.value));
    for s in &shapes {
        placements.push(Placement {
            kind: RuleKind::Shape,
            name: s.name.value.clone(),
            chain: None,
            backends: vec![BackendKind::Nftables, BackendKind::Qos],
            reason: "nftables marks the traffic; an eBPF token bucket enforces the rate".into(),
        });
    }
    let snats: Vec<&SnatRule> = rs.snats.iter().filter(|s| applies(&s.on)).collect();
    for s in &snats {
        let reason = match s.kind {
            SnatKind::Masquerade => "nftables source NAT (nat postrouting, after fwc's own forward masquerade, first match wins): the new source is the out interface's address",
            SnatKind::Snat => "nftables source NAT (nat postrouting, after fwc's own forward masquerade, first match wins): the new source is the to= address",
        };
        placements.push(Placement { kind: s.kind.rule_kind(), name: s.name.value.clone(), chain: None, backends: vec![BackendKind::Nftables], reason: reason.into() });
    }
    let layouts = set_layouts(&sets, &chains, &kernel_forwards, &userspace_forwards, &shapes);
    for p in placements.iter_mut().filter(|p| p.kind == RuleKind::Set && p.reason.is_empty()) {
        p.reason = layouts[p.name.as_str()].describe();
    }
    placements.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    placements.shrink_to_fit();

    let qos_classes = classes::assign_classes(&kernel_forwards, &shapes);
    let set_index = sets.iter().map(|s| (s.name.value.as_str(), *s)).collect();
    // Class rules are names of forwards/shapes that live as long as `rs`.
    let rule_names: BTreeMap<(RuleKind, &str), &'a str> = kernel_forwards
        .iter()
        .map(|f| ((RuleKind::Forward, f.name.value.as_str()), f.name.value.as_str()))
        .chain(shapes.iter().map(|s| ((RuleKind::Shape, s.name.value.as_str()), s.name.value.as_str())))
        .collect();
    let class_index = qos_classes
        .iter()
        .enumerate()
        .map(|(i, c)| ((c.kind, rule_names[&(c.kind, c.rule.as_str())], c.direction), i))
        .collect();
    HostPlan { host, sets, chains, kernel_forwards, userspace_forwards, shapes, snats, qos_classes, placements, layouts, set_index, class_index }
}

/// The implicit host used when the repository declares none.
pub fn implicit_host() -> Host {
    Host { name: Spanned::new("localhost".into(), Span::default()), labels: BTreeMap::new(), vars: BTreeMap::new() }
}
