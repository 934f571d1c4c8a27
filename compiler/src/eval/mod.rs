//! The pure evaluator: what the compiled artifacts do to one flow, the way the kernel runs them
//! — netfilter hooks in order (prerouting, routing, input/forward, postrouting; or output,
//! postrouting), base chains by priority, then the userspace forwarder's listeners and the
//! QoS class the eBPF program will charge. It reads `nftables.json`, `qos.json` and
//! `forward.json` as emitted (never the emitter's code), so it can also explain an applied
//! generation read back from the state dir. Rule identities (`fwc:<kind>:<name>`) map back to
//! KDL file:line:column through [`rule_locations`].

pub mod effects;
pub mod flow;
pub mod foreign;
pub mod headers;
pub mod listing_forms;
pub mod nft;
pub mod render;

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::Serialize;

use crate::artifacts::{Artifacts, ForwardArtifact, Listener, ListenerProto, QosArtifact, QosDirection, QOS_MARK_MASK};
use crate::diag::{line_col, Location};
use crate::read::source::SourceMap;
use crate::view::HostView;
pub use flow::{Flow, FlowError, FlowSpec, Origin, RouteBack, L4};
pub use nft::{EvalError, Effect, Hit, Verdict};

/// The artifacts of one host, ready to evaluate many flows.
#[derive(Debug, Clone)]
pub struct Evaluator {
    table: nft::Table,
    qos: QosArtifact,
    forward: ForwardArtifact,
    /// The time flows are evaluated at (schedules' `meta day` / `meta hour`).
    at: Option<jiff::Timestamp>,
}

/// One netfilter hook the flow passed, with the rules that matched on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HookStep {
    /// `prerouting`, `input`, `forward`, `output`, `postrouting`.
    pub hook: String,
    /// Which way the packet goes (`original`; `reply` for the QoS class of answers).
    pub direction: &'static str,
    /// fwc's base chains on this hook, in the order they ran.
    pub chains: Vec<String>,
    pub hits: Vec<Hit>,
    pub verdict: Verdict,
}

/// The rule (or chain policy) that decided the verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// `fwc:<kind>:<name>` of the rule; `None` for fwc's built-in rules and for a policy.
    pub identity: Option<String>,
    pub chain: String,
    /// Index of the rule in its chain; `None` when the chain's policy decided.
    pub index: Option<usize>,
    /// Human description: `rule fwc:filter:ssh`, `policy drop of chain input`,
    /// `built-in rule 0 of chain input (ct state established,related accept)`.
    pub what: String,
}

/// A `masquerade` / `snat` rule's translation of a flow's source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SourceNat {
    /// `fwc:masquerade:<name>` / `fwc:snat:<name>`.
    pub rule: String,
    /// The new source address; `None` for masquerade (the out interface's address).
    pub to: Option<IpAddr>,
}

/// The userspace forwarder's part in a flow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UserspaceHit {
    pub rule: String,
    pub listen: String,
    pub targets: Vec<String>,
    /// False when the listener's `allow_from` does not hold the client (the forwarder closes it).
    pub allowed: bool,
}

/// A QoS class the flow is charged to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QosHit {
    pub id: u32,
    pub rule: String,
    pub direction: QosDirection,
}

/// Everything the evaluator found out about one flow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Explanation {
    pub flow: String,
    /// Where the packet went after routing: `input` (delivered here), `forward`, `output`.
    pub path: Origin,
    pub steps: Vec<HookStep>,
    pub verdict: Verdict,
    pub decided_by: Decision,
    /// DNAT target (address, port) when a DNAT rule or map element rewrote the destination.
    pub dnat: Option<(IpAddr, u16)>,
    /// The DNAT's identity (map element or rule comment).
    pub dnat_rule: Option<String>,
    /// All targets of a round-robin DNAT (`dnat` is the first connection's).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dnat_round_robin: Vec<(IpAddr, u16)>,
    /// A kernel forward to a DNS name: `name:port`. Its DNAT chain is filled by the forwarder
    /// from the name's answers, so the evaluator follows the name, not an address: the flow
    /// counts as DNATed (`ct status dnat`) and forwarded, its destination seen by the filter
    /// chains stays the original one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dnat_name: Option<String>,
    pub masquerade: bool,
    /// The user's source NAT (`masquerade` / `snat` rule) that translated the flow.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snat: Option<SourceNat>,
    pub userspace: Option<UserspaceHit>,
    /// Classes charged (original direction first, then replies).
    pub qos: Vec<QosHit>,
    /// Per-source limits on the flow's way, in words: the evaluator assumes the
    /// source is within them (it cannot know the source's other connections).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<String>,
}

impl Explanation {
    /// Every identity that matched on the way, in order, without repeats.
    pub fn matched_rules(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for s in &self.steps {
            for h in &s.hits {
                if let Some(id) = h.identity.as_deref() {
                    if !out.contains(&id) {
                        out.push(id);
                    }
                }
            }
        }
        out
    }
}

/// The user's source NAT a postrouting rule did, if it is a `masquerade` / `snat` rule.
fn source_nat(h: &Hit) -> Option<SourceNat> {
    let id = h.identity.as_deref()?;
    let (kind, _) = crate::artifacts::parse_rule_comment(id)?;
    let to = h.effects.iter().find_map(|e| match e {
        Effect::Snat { addr } => Some(Some(*addr)),
        Effect::Masquerade => Some(None),
        _ => None,
    })?;
    matches!(kind, crate::artifacts::RuleKind::Masquerade | crate::artifacts::RuleKind::Snat).then(|| SourceNat { rule: id.to_string(), to })
}

impl Evaluator {
    pub fn new(a: &Artifacts) -> Result<Evaluator, EvalError> {
        Ok(Evaluator { table: nft::Table::from_json(&a.nftables)?, qos: a.qos.clone(), forward: a.forward.clone(), at: None })
    }

    /// fwc's artifacts beside the host's other tables (`listing`: `nft -j list ruleset`
    /// without fwc's own tables): what the host does to a flow while both are loaded.
    pub fn beside(a: &Artifacts, listing: &serde_json::Value) -> Result<Evaluator, EvalError> {
        Ok(Evaluator { table: foreign::beside_fwc(&a.nftables, listing)?, qos: a.qos.clone(), forward: a.forward.clone(), at: None })
    }

    /// An evaluator of a bare nftables table (a foreign ruleset read by
    /// [`foreign::table_from_listing`]): no QoS classes, no userspace listeners.
    pub fn from_table(table: nft::Table) -> Evaluator {
        Evaluator { table, qos: QosArtifact::default(), forward: ForwardArtifact::default(), at: None }
    }

    /// Evaluate flows at `t` (the kernel's `meta day` / `meta hour`, UTC, of `during=` rules).
    /// Without it: at the Unix epoch, the time [`crate::emit_view`] compiles for.
    pub fn at(mut self, t: jiff::Timestamp) -> Evaluator {
        self.at = Some(t);
        self
    }

    /// Evaluate the first packet of `flow`.
    pub fn explain(&self, flow: &Flow) -> Result<Explanation, EvalError> {
        let local: Vec<IpAddr> = match flow.origin {
            Origin::Input => vec![flow.daddr],
            Origin::Forward => vec![],
            Origin::Output => {
                let mut v = vec![flow.saddr];
                if flow.daddr.is_loopback() {
                    v.push(flow.daddr);
                }
                v
            }
        };
        let mut p = nft::Packet::new(flow, local);
        p.at = self.at.map(|t| t.as_second());
        let mut steps = Vec::new();
        let mut path = flow.origin;
        let mut decided: Option<(nft::HookResult, String)> = None;
        let mut finished = false;

        let hooks_before: &[&str] = match flow.origin {
            Origin::Input | Origin::Forward => &["prerouting"],
            Origin::Output => {
                if p.local.contains(&p.daddr) {
                    p.oifname = Some("lo".into());
                }
                &["output"]
            }
        };
        for hook in hooks_before {
            let r = self.step(hook, "original", &mut p, &mut steps, false)?;
            if r.verdict != Verdict::Accept || *hook == "output" {
                decided = Some((r.clone(), hook.to_string()));
            }
            if r.verdict != Verdict::Accept {
                finished = true;
                break;
            }
        }
        let dns = self.dns_forward(&steps);
        if dns.is_some() {
            p.ct_dnat = true;
            p.local.retain(|a| *a != p.daddr);
        }
        let delivered_here = p.local.contains(&p.daddr);
        if !finished && flow.origin != Origin::Output {
            path = if delivered_here { Origin::Input } else { Origin::Forward };
            let hook = path.as_str();
            let r = self.step(hook, "original", &mut p, &mut steps, false)?;
            finished = r.verdict != Verdict::Accept;
            decided = Some((r, hook.to_string()));
        }
        if flow.origin == Origin::Output && p.ct_dnat && p.oifname.as_deref() == Some("lo") && !delivered_here {
            // Rerouted after nat output: the new destination is reached through a real interface.
            p.oifname = flow.oif.clone();
        }
        // Forwarded and locally sent packets pass postrouting (to `lo` too).
        let leaves = !finished && matches!(path, Origin::Forward | Origin::Output);
        let mut masquerade = false;
        let mut snat = None;
        let mut qos = Vec::new();
        if leaves {
            let r = self.step("postrouting", "original", &mut p, &mut steps, false)?;
            masquerade = steps.last().is_some_and(|s| s.hits.iter().any(|h| h.effects.contains(&Effect::Masquerade)));
            snat = steps.last().and_then(|s| s.hits.iter().find_map(|h| source_nat(h)));
            if r.verdict != Verdict::Accept {
                finished = true;
                decided = Some((r, "postrouting".into()));
            }
            if let Some(c) = self.class_of(p.meta_mark) {
                qos.push(c);
            }
            // The answers: same connection, reply direction, through the interfaces reversed.
            if !finished && path != Origin::Output {
                let mut reply = p.clone();
                std::mem::swap(&mut reply.saddr, &mut reply.daddr);
                std::mem::swap(&mut reply.sport, &mut reply.dport);
                std::mem::swap(&mut reply.iifname, &mut reply.oifname);
                reply.meta_mark = 0;
                reply.ct_direction = "reply";
                reply.ct_state = "established";
                self.step("postrouting", "reply", &mut reply, &mut steps, true)?;
                if let Some(c) = self.class_of(reply.meta_mark) {
                    qos.push(c);
                }
            }
        }
        let userspace = if !finished && delivered_here { self.listener_for(&p) } else { None };
        let userspace_limits = userspace.as_ref().filter(|u| u.allowed).and_then(|u| self.userspace_per_source(&u.rule));
        let (result, hook) = decided.unwrap_or((nft::HookResult { verdict: Verdict::Accept, decided_by: None, policy_of: None }, path.as_str().into()));
        let dnat_hit = steps.iter().flat_map(|s| &s.hits).find(|h| h.effects.iter().any(|e| matches!(e, Effect::Dnat { .. })));
        Ok(Explanation {
            flow: flow.to_string(),
            path,
            verdict: if finished { result.verdict } else { Verdict::Accept },
            decided_by: self.decision(&result, &hook),
            dnat: (p.ct_dnat && dns.is_none()).then_some((p.daddr, p.dport)),
            dnat_rule: dnat_hit.and_then(|h| h.identity.clone()).or_else(|| dns.map(|d| crate::artifacts::rule_comment(crate::artifacts::RuleKind::Forward, &d.rule))),
            dnat_name: dns.map(|d| format!("{}:{}", d.name, d.port.unwrap_or(flow.dport))),
            dnat_round_robin: p.round_robin.iter().map(|(a, port)| (*a, port.unwrap_or(flow.dport))).collect(),
            masquerade,
            snat,
            userspace,
            qos,
            steps,
            limits: std::mem::take(&mut p.limits).into_iter().chain(userspace_limits).collect(),
        })
    }

    /// The per-source limits of userspace forward `rule`, in words.
    fn userspace_per_source(&self, rule: &str) -> Option<String> {
        let l = self.forward.listeners.iter().find(|l| l.rule == rule)?;
        let p = l.per_source?;
        let mut what = Vec::new();
        if let Some(r) = p.conn_rate {
            what.push(format!("at most {} new connections per {} s (burst {}) per source, over it closed", r.count, r.period_secs, r.burst));
        }
        if let Some(m) = p.max_conns {
            what.push(format!("at most {m} concurrent connections per source, over it closed"));
        }
        Some(format!(
            "fwc:forward:{rule}: per-source limit (userspace forwarder): {} (IPv4 /{}, IPv6 /{}); a new source is also refused while {} sources are tracked — assumed here: the source is within its limit",
            what.join(", "),
            p.prefix4,
            p.prefix6,
            p.size
        ))
    }

    /// The kernel forward to a DNS name whose DNAT chain the first hook's rules went to.
    fn dns_forward(&self, steps: &[HookStep]) -> Option<&crate::artifacts::KernelDns> {
        let entered: Vec<&str> = steps
            .iter()
            .flat_map(|s| &s.hits)
            .flat_map(|h| &h.effects)
            .filter_map(|e| match e {
                Effect::Goto { chain } | Effect::Jump { chain } => Some(chain.as_str()),
                _ => None,
            })
            .collect();
        self.forward.kernel_dns.iter().find(|d| entered.contains(&d.chain.as_str()))
    }

    fn step(&self, hook: &str, direction: &'static str, p: &mut nft::Packet, steps: &mut Vec<HookStep>, skip_nat: bool) -> Result<nft::HookResult, EvalError> {
        let mut hits = Vec::new();
        let skip_nat = skip_nat || p.ct_state == "invalid";
        let chains: Vec<String> = self
            .table
            .base_chains(hook)
            .iter()
            .filter(|c| !(skip_nat && c.hook.as_ref().is_some_and(|h| h.kind == "nat")))
            .map(|c| c.name.clone())
            .collect();
        let r = nft::run_hook(&self.table, hook, p, &mut hits, skip_nat)?;
        steps.push(HookStep { hook: hook.to_string(), direction, chains, hits, verdict: r.verdict });
        Ok(r)
    }

    fn decision(&self, r: &nft::HookResult, hook: &str) -> Decision {
        match (&r.decided_by, &r.policy_of) {
            // `policy=reject` (and the containers policy): fwc's rule standing for the chain's
            // policy, `fwc:chain:<chain>`, decides as the policy.
            (Some(hit), _) if hit.identity.as_deref().and_then(crate::artifacts::parse_rule_comment).is_some_and(|(k, _)| k == crate::artifacts::RuleKind::Chain) => {
                let chain = hit.identity.as_deref().and_then(crate::artifacts::parse_rule_comment).map_or(hit.chain.as_str(), |(_, n)| n);
                Decision {
                    identity: hit.identity.clone(),
                    chain: hit.chain.clone(),
                    index: None,
                    what: format!("policy {} of chain {chain}", r.verdict.as_str()),
                }
            }
            (Some(hit), _) => Decision {
                identity: hit.identity.clone(),
                chain: hit.chain.clone(),
                index: Some(hit.index),
                what: match &hit.identity {
                    Some(id) => format!("rule {id} (chain {}, rule {})", hit.chain, hit.index),
                    None if hit.matches.is_empty() => format!("built-in rule {} of chain {}", hit.index, hit.chain),
                    None => format!("built-in rule {} of chain {} ({})", hit.index, hit.chain, hit.matches),
                },
            },
            (None, Some(chain)) => Decision {
                identity: None,
                chain: chain.clone(),
                index: None,
                what: format!("policy {} of chain {chain}", r.verdict.as_str()),
            },
            (None, None) => Decision {
                identity: None,
                chain: hook.to_string(),
                index: None,
                what: format!("no fwc chain on the {hook} hook: the kernel's default (accept)"),
            },
        }
    }

    fn class_of(&self, mark: u32) -> Option<QosHit> {
        let bits = mark & QOS_MARK_MASK;
        if bits == 0 {
            return None;
        }
        self.qos.classes.iter().find(|c| c.mark == bits).map(|c| QosHit { id: c.id, rule: c.rule.clone(), direction: c.direction })
    }

    fn listener_for(&self, p: &nft::Packet) -> Option<UserspaceHit> {
        let proto = match p.proto {
            L4::Tcp => ListenerProto::Tcp,
            L4::Udp => ListenerProto::Udp,
            _ => return None,
        };
        let on_socket = |l: &&Listener| {
            l.proto == proto
                && l.listen_port == p.dport
                && match l.listen_addr.as_str() {
                    "::" => true,
                    "0.0.0.0" => p.daddr.is_ipv4(),
                    lit => lit.parse::<IpAddr>().is_ok_and(|a| a == p.daddr),
                }
        };
        // A socket shared by `sni=` routes: a flow carries no TLS server name, so it takes the
        // route of a hello without one, the fallback (none: the forwarder closes it).
        let mut here = self.forward.listeners.iter().filter(on_socket).peekable();
        let first = *here.peek()?;
        let l: &Listener = match first.sni {
            None => first,
            Some(_) => here.find(|l| l.sni.is_none())?,
        };
        let allowed = l.allow_from.is_empty()
            || l.allow_from.iter().any(|n| {
                n.parse::<ipnet::IpNet>().map(|n| n.contains(&p.saddr)).or_else(|_| n.parse::<IpAddr>().map(|a| a == p.saddr)).unwrap_or(false)
            });
        let listen = match l.listen_addr.parse::<IpAddr>() {
            Ok(IpAddr::V6(a)) => format!("[{a}]:{}", l.listen_port),
            _ => format!("{}:{}", l.listen_addr, l.listen_port),
        };
        Some(UserspaceHit {
            rule: l.rule.clone(),
            listen,
            targets: l.targets.iter().map(|t| if t.host.contains(':') { format!("[{}]:{}", t.host, t.port) } else { format!("{}:{}", t.host, t.port) }).collect(),
            allowed,
        })
    }
}

/// `fwc:<kind>:<name>` -> where that rule is written, for every rule of a host view.
pub fn rule_locations(view: &HostView) -> BTreeMap<String, Location> {
    use crate::emit::nft::rule_comment;
    use crate::model::RuleKind;
    let mut out = BTreeMap::new();
    let mut positions = crate::diag::Positions::new(&view.map);
    let mut put = |kind: RuleKind, name: &str, span: crate::model::Span| {
        out.insert(rule_comment(kind, name), positions.locate(span));
    };
    for c in &view.ruleset.chains {
        // A chain's own rules (`policy=reject`) stand for its policy: where it was given.
        if let Some(p) = &c.policy {
            put(RuleKind::Chain, c.kind.as_str(), p.span);
        }
        for r in &c.rules {
            put(RuleKind::Filter, &r.name.value, r.span);
        }
    }
    for s in &view.ruleset.snats {
        put(s.kind.rule_kind(), &s.name.value, s.span);
    }
    for f in &view.ruleset.forwards {
        put(RuleKind::Forward, &f.name.value, f.span);
    }
    for s in &view.ruleset.shapes {
        put(RuleKind::Shape, &s.name.value, s.span);
    }
    for s in &view.ruleset.sets {
        put(RuleKind::Set, &s.name.value, s.span);
    }
    out
}

/// Rule positions as an applied generation's manifest recorded them (`source`), by rule
/// identity (`fwc:<kind>:<name>`): what `explain --live` and drift reports show.
pub fn manifest_locations(m: &crate::artifacts::Manifest) -> BTreeMap<String, Location> {
    m.rules.iter().filter_map(|r| Some((crate::emit::nft::rule_comment(r.kind, &r.name), parse_location(r.source.as_deref()?)?))).collect()
}

/// `rules/web.kdl:12:5` -> Location (the file part may hold anything but the last two colons).
pub fn parse_location(s: &str) -> Option<Location> {
    let mut it = s.rsplitn(3, ':');
    let column = it.next()?.parse().ok()?;
    let line = it.next()?.parse().ok()?;
    Some(Location { file: it.next()?.to_string(), line, column })
}

/// Resolve a span to file:line:column.
pub fn locate(map: &SourceMap, span: crate::model::Span) -> Location {
    let file = map.file(span.file);
    let offset = (span.offset as usize).min(file.text.len());
    let (line, column) = line_col(&file.text, offset);
    Location { file: file.path.clone(), line, column }
}

#[cfg(test)]
mod tests;
