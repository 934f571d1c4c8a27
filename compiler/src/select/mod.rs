//! Backend selection: which rules apply to a host, and which dataplane each one goes to, with
//! the reason a human reads in `fwc plan`. The whole decision lives in [`place_forward`]; the
//! result, a [`HostPlan`], is the only input the emitters read.

pub mod classes;

use std::collections::BTreeMap;

use crate::artifacts::{BackendKind, QosClass, QosDirection};
use crate::model::*;

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
    pub rules: Vec<&'a FilterRule>,
}

/// Everything the emitters need for one host.
#[derive(Debug, Clone)]
pub struct HostPlan<'a> {
    pub host: &'a Host,
    /// Every set of the repository, in name order (sets have no `on=`; unused ones are emitted
    /// too so `nft list` shows them).
    pub sets: Vec<&'a AddrSet>,
    /// Always input, forward, output, in that order.
    pub chains: Vec<ChainPlan<'a>>,
    /// Forwards to IP literals handled by nftables DNAT (sorted by name).
    pub kernel_forwards: Vec<&'a ForwardRule>,
    /// Forwards run by the userspace forwarder (sorted by name).
    pub userspace_forwards: Vec<&'a ForwardRule>,
    /// Shape rules for this host (sorted by name).
    pub shapes: Vec<&'a ShapeRule>,
    /// QoS classes (kernel forwards with a cap, and shapes), sorted by id.
    pub qos_classes: Vec<QosClass>,
    /// Per rule: backend and reason (sorted by kind, name).
    pub placements: Vec<Placement>,
    /// Lookup indexes, so emitters stay linear in the number of rules.
    set_index: BTreeMap<&'a str, &'a AddrSet>,
    class_index: BTreeMap<(RuleKind, &'a str, QosDirection), usize>,
}

impl<'a> HostPlan<'a> {
    /// The set named `name` (check has made sure it exists).
    pub fn set(&self, name: &str) -> Option<&'a AddrSet> {
        self.set_index.get(name).copied()
    }

    /// The QoS class of rule `rule` in direction `dir`, if the rule has one.
    pub fn qos_class(&self, kind: RuleKind, rule: &str, dir: QosDirection) -> Option<&QosClass> {
        self.class_index.get(&(kind, rule, dir)).map(|&i| &self.qos_classes[i])
    }
}

/// Which dataplane a forward goes to, and why. This is the table in docs/design.md, in one place.
pub fn place_forward(f: &ForwardRule) -> (Vec<BackendKind>, String) {
    let dns = f.targets.value.iter().find_map(|t| match &t.host {
        TargetHost::Dns(n) => Some(n.clone()),
        TargetHost::Ip(_) => None,
    });
    let capped = f.up.is_some() || f.down.is_some();
    let userspace_reason = match () {
        _ if f.backend.value == BackendChoice::Userspace => Some("backend=\"userspace\" was asked for".to_string()),
        _ if dns.is_some() => Some(format!("DNS target {} needs userspace (the kernel NATs to addresses only)", dns.unwrap_or_default())),
        _ if f.proxy_protocol.is_some() => Some("PROXY protocol needs userspace (the kernel cannot add a header)".into()),
        _ if f.idle_timeout_ms.is_some() => Some("idle-timeout needs userspace".into()),
        _ => None,
    };
    match userspace_reason {
        Some(r) => (vec![BackendKind::Userspace], r),
        None if capped => (
            vec![BackendKind::Nftables, BackendKind::Qos],
            "IP-literal targets: nftables DNAT; the bandwidth cap is an eBPF token bucket on the marked flow".into(),
        ),
        None => (vec![BackendKind::Nftables], "IP-literal targets: nftables DNAT + masquerade (fastest path)".into()),
    }
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
            None => "named nftables set (interval, one per address family)",
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
    for kind in [ChainKind::Input, ChainKind::Forward, ChainKind::Output] {
        let mut policy = Policy::Accept;
        let mut policy_span = None;
        let mut rules = Vec::new();
        for c in rs.chains.iter().filter(|c| c.kind == kind) {
            if let Some(p) = &c.policy {
                policy = p.value;
                policy_span = Some(p.span);
            }
            rules.extend(c.rules.iter().filter(|r| applies(&r.on)));
        }
        placements.push(Placement {
            kind: RuleKind::Chain,
            name: kind.as_str().to_string(),
            chain: Some(kind),
            backends: vec![BackendKind::Nftables],
            reason: "nftables filter chain: first match wins, then the policy".into(),
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
        chains.push(ChainPlan { kind, policy, policy_span, rules });
    }

    let mut kernel_forwards = Vec::new();
    let mut userspace_forwards = Vec::new();
    let mut forwards: Vec<&ForwardRule> = rs.forwards.iter().filter(|f| applies(&f.on)).collect();
    forwards.sort_by(|a, b| a.name.value.cmp(&b.name.value));
    for f in forwards {
        let (backends, reason) = place_forward(f);
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
    placements.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));

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
    HostPlan { host, sets, chains, kernel_forwards, userspace_forwards, shapes, qos_classes, placements, set_index, class_index }
}

/// The implicit host used when the repository declares none.
pub fn implicit_host() -> Host {
    Host { name: Spanned::new("localhost".into(), Span::default()), labels: BTreeMap::new(), vars: BTreeMap::new() }
}
