//! The prerouting hook's filter chains (nft `hook prerouting`, iptables' `raw` and `mangle`
//! PREROUTING): their drops become fwc's `prerouting { deny … }` block. An accept there ends
//! only its own chain (the packet goes on to the next chain of the hook, then input or
//! forward), so an accept after the chain's last drop changes nothing and is merged, while an
//! accept that spares packets from a later drop has no fwc form and is refused by line. What
//! fwc's block, which runs before conntrack (priority -300) or just after it (-150), would
//! decide differently from the original chain's priority is refused by line too.

use serde_json::Value;

use super::owned::owner;
use super::tx::*;
use crate::import::model::*;

/// Is `c` a filter chain on the prerouting hook that the `prerouting` block takes?
pub(super) fn early_filter(c: &ChainInfo) -> bool {
    matches!(c.family.as_str(), "ip" | "ip6" | "inet") && c.kind == "filter" && c.hook.as_deref() == Some("prerouting")
}

/// nftables' priority of the destination NAT hook (`dstnat`): chains after it see the DNATed
/// destination; fwc's prerouting block sees the one the client addressed.
const DSTNAT: i64 = -100;

/// Before conntrack (`raw`, -300 < -200) no packet has a conntrack state yet.
const CONNTRACK: i64 = -200;

impl Tx<'_> {
    /// Translate the prerouting filter chains (in priority order) into one `prerouting` block.
    pub(super) fn prerouting(&mut self, mut chains: Vec<ChainInfo>) {
        chains.sort_by_key(|c| c.prio);
        let dnat = self.chains.values().any(|c| c.kind == "nat" && c.hook.as_deref() == Some("prerouting") && !c.rules.is_empty() && owner(&c.family, &c.table, &c.name).is_none());
        let mut denies = Vec::new();
        for c in chains {
            let place = format!("the prerouting hook ({} {} {}, priority {})", c.family, c.table, c.name, c.prio);
            // Walked from no condition (as a base chain's top level), then limited to the
            // chain's family: an `ip` table's drop sees IPv4 only.
            let mut rules = Vec::new();
            self.walk(&c, &Cond::default(), "prerouting", 0, None, &mut rules);
            let fam = match c.family.as_str() {
                "ip" => Some(Family::V4),
                "ip6" => Some(Family::V6),
                _ => None,
            };
            for r in &mut rules {
                r.cond.family = r.cond.family.or(fam);
            }
            self.merge_logs(&mut rules);
            let last_drop = rules.iter().rposition(|r| matches!(r.verb, Verb::Deny | Verb::Reject(_)));
            for (k, r) in rules.into_iter().enumerate() {
                match r.verb {
                    Verb::Deny => {
                        if let Some(why) = self.differs_at(&c, &r.cond, dnat) {
                            self.names.remove(&r.name);
                            self.out.refused.push(Refusal { origin: r.origin, what: format!("a drop on {place} {why}"), hint: keep_it() });
                            continue;
                        }
                        denies.push(r);
                    }
                    Verb::Allow if last_drop.is_some_and(|d| d > k) => {
                        self.names.remove(&r.name);
                        self.out.refused.push(Refusal {
                            origin: r.origin,
                            what: format!("an accept on {place} that spares packets from the drops after it in that chain (an accept there ends only its own chain; fwc's prerouting block holds drops only)"),
                            hint: format!("narrow the later drops in the original so they leave these packets out (`ip saddr != …`), {}", keep_it()),
                        });
                    }
                    Verb::Allow => {
                        self.names.remove(&r.name);
                        self.out.merged.push((r.origin, format!("an accept on {place} after its last drop: it ends only that chain, and the packet goes on to input or forward as without it")));
                    }
                    Verb::Log => {
                        self.names.remove(&r.name);
                        self.out.merged.push((r.origin, "logging before routing (no drop follows with the same matches) is left out: fwc logs the prerouting block's drops with log=".into()));
                    }
                    Verb::ClampMss(_) => {
                        self.names.remove(&r.name);
                        self.out.refused.push(Refusal { origin: r.origin, what: format!("MSS clamping on {place}"), hint: format!("fwc clamps routed SYNs in the forward block (`forward {{ clamp-mss … }}`): move it to a forward chain of its own at the mangle priority, {}", keep_it()) });
                    }
                    Verb::Reject(_) => {
                        self.names.remove(&r.name);
                        self.out.refused.push(Refusal { origin: r.origin, what: format!("a reject on {place}"), hint: format!("fwc's prerouting block drops (`deny`); reject in input or forward instead, {}", keep_it()) });
                    }
                }
            }
            if c.policy == "drop" {
                self.out.refused.push(Refusal {
                    origin: format!("policy drop of chain {} {} {}", c.family, c.table, c.name),
                    what: format!("a drop policy on {place}"),
                    hint: format!("fwc's prerouting block has no policy (what it does not drop goes on to input and forward): give the input and forward blocks `policy=drop`, {}", keep_it()),
                });
            }
        }
        if denies.is_empty() {
            return;
        }
        match self.out.chains.iter_mut().find(|c| c.kind == "prerouting") {
            Some(block) => block.rules.extend(denies),
            None => self.out.chains.push(Chain { kind: "prerouting", policy: "accept", reject_with: None, rules: denies, part: None }),
        }
    }

    /// Why fwc's prerouting block would decide a drop of chain `c` differently, if it would.
    fn differs_at(&self, c: &ChainInfo, cond: &Cond, dnat: bool) -> Option<String> {
        if c.prio < CONNTRACK && cond.state.is_some() {
            return Some("matches a conntrack state before conntrack runs (every packet's state reads as `invalid` there)".into());
        }
        if c.prio > DSTNAT && dnat && (cond.to.is_some() || cond.port.is_some()) {
            return Some("matches the destination after DNAT (fwc's prerouting block matches it as the client addressed it)".into());
        }
        None
    }
}

/// A rule's matches include a reverse-path `fib` lookup (`fib saddr . iif oif missing`).
pub(super) fn reverse_path(expr: &[Value]) -> bool {
    expr.iter().any(|e| e.pointer("/match/left/fib").is_some_and(|f| f.get("result").and_then(Value::as_str) != Some("type")))
}

fn keep_it() -> String {
    "or import with --partial and keep it in an nftables table of your own (fwc's table coexists with others)".into()
}
