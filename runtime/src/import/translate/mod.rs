//! The pure translation: an nftables listing (`nft -j list ruleset`, whatever the source was)
//! to fwc's rules ([`Imported`]). Filter base chains become `input`/`forward`/`output` blocks,
//! jumps to user chains are inlined, DNAT becomes forwards, masquerade/SNAT become `masquerade`
//! and `snat` nodes; Docker's, libvirt's and Kubernetes' chains are left out with a note; what
//! fwc cannot say is a [`Refusal`] naming its origin, never silently dropped.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::model::*;
use super::naming::Names;

mod chains;
mod nat;
mod other;
mod owned;
mod parse;
mod prerouting;
mod probes;
mod router;
mod tx;
mod walk;

pub use super::model::Origins;
pub use owned::{owner, strip_owned};
pub use parse::addr_elem;
pub use probes::probe_chains;
pub use walk::icmp_opens;
use tx::*;

/// Translate a listing. Never fails: every problem is a refusal in the result.
pub fn translate(listing: &Value, origins: &Origins) -> Imported {
    let mut tx = Tx { chains: BTreeMap::new(), sets: BTreeMap::new(), origins, out: Imported::default(), names: Names::default(), notes: BTreeSet::new(), grouped: BTreeMap::new(), passed_over: Vec::new(), invalid_dropped: None };
    tx.read(listing);
    tx.sets_out();
    for hook in ["input", "forward", "output"] {
        tx.filter_hook(hook);
    }
    tx.nat();
    tx.other_hooks();
    tx.out.notes.extend(std::mem::take(&mut tx.notes));
    for (what, places) in std::mem::take(&mut tx.grouped) {
        let more = places.len().saturating_sub(20);
        let shown = places.into_iter().take(20).collect::<Vec<_>>().join(", ");
        tx.out.notes.push(if more > 0 { format!("{what}: {shown} and {more} more") } else { format!("{what}: {shown}") });
    }
    tx.out
}

impl Tx<'_> {
    fn filter_hook(&mut self, hook: &'static str) {
        let bases = self.base(hook, "filter");
        // One chain per address family (an inet chain serves both).
        let mut v4: Vec<&ChainInfo> = bases.iter().filter(|c| c.family != "ip6").collect();
        let mut v6: Vec<&ChainInfo> = bases.iter().filter(|c| c.family != "ip").collect();
        let trivial = |c: &&ChainInfo| c.rules.is_empty() && c.policy == "accept";
        if v4.len() > 1 {
            v4.retain(|c| !trivial(c));
        }
        if v6.len() > 1 {
            v6.retain(|c| !trivial(c));
        }
        // Beside the filter chain (priority 0), a mangle/raw/security chain of the same hook
        // (iptables' mangle INPUT, a `priority -150` chain) is not a second filter: its rules
        // are refused by name with the other hooks'.
        for fam in [&mut v4, &mut v6] {
            if fam.len() > 1 && fam.iter().filter(|c| c.prio == 0).count() == 1 {
                for c in fam.iter().filter(|c| c.prio != 0) {
                    if !self.passed_over.iter().any(|p| (&p.family, &p.table, &p.name) == (&c.family, &c.table, &c.name)) {
                        self.passed_over.push((*c).clone());
                    }
                }
                fam.retain(|c| c.prio == 0);
            }
        }
        for fam in [&v4, &v6] {
            if fam.len() > 1 {
                let names: Vec<String> = fam.iter().map(|c| format!("{} {} {}", c.family, c.table, c.name)).collect();
                self.out.refused.push(Refusal {
                    origin: names.join(", "),
                    what: format!("several base chains filter the {hook} hook for one address family; a packet must pass all of them"),
                    hint: "merge them into one chain in the original (or import each table separately and combine by hand)".into(),
                });
                return;
            }
        }
        let (c4, c6) = (v4.first().map(|c| (*c).clone()), v6.first().map(|c| (*c).clone()));
        if c4.is_none() && c6.is_none() {
            return;
        }
        let mut rules = Vec::new();
        let same = match (&c4, &c6) {
            (Some(a), Some(b)) => a.family == b.family && a.table == b.table && a.name == b.name,
            _ => false,
        };
        let pol = |c: &Option<ChainInfo>| c.as_ref().map_or("accept", |c| if c.policy == "drop" { "drop" } else { "accept" });
        let (p4, p6) = (pol(&c4), pol(&c6));
        if same {
            let c = c4.clone().unwrap();
            self.invalid_dropped = None;
            self.walk(&c, &Cond::default(), hook, 0, None, &mut rules);
        } else {
            for (c, fam) in [(&c4, Family::V4), (&c6, Family::V6)] {
                if let Some(c) = c {
                    self.invalid_dropped = None;
                    let start = Cond { family: Some(fam), ..Cond::default() };
                    self.walk(c, &start, hook, 0, None, &mut rules);
                }
            }
        }
        let mut policy: &'static str = if p4 == p6 { p4 } else { "drop" };
        if p4 != p6 {
            let (fam, label, chain) = if p4 == "accept" { (Family::V4, "ipv4", &c4) } else { (Family::V6, "ipv6", &c6) };
            let origin = match chain {
                Some(c) => format!("policy accept of chain {} {} {}", c.family, c.table, c.name),
                None => format!("no {label} chain on the {hook} hook: the kernel accepts {label}"),
            };
            let name = self.unique(&format!("{label}-{hook}-accept"));
            rules.push(Rule { name, verb: Verb::Allow, cond: Cond { family: Some(fam), ..Cond::default() }, rate: None, per_source: false, log: false, log_prefix: None, log_rate: None, comment: None, origin });
        }
        self.merge_logs(&mut rules);
        // A last catch-all reject is the chain's policy (fwc's forwards stay accepted after it).
        let mut reject_with = None;
        if rules.last().is_some_and(|l| l.cond == Cond::default() && matches!(l.verb, Verb::Reject(_)) && !l.log) {
            let last = rules.pop().unwrap();
            self.out.merged.push((last.origin.clone(), format!("a final reject of everything became `{hook} policy=reject`")));
            policy = "reject";
            if let Verb::Reject(t) = last.verb {
                reject_with = t;
            }
        }
        self.out.chains.push(Chain { kind: hook, policy, reject_with, rules, part: None });
    }
}
