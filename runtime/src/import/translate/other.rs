//! The hooks and tables fwc has no rules for (yet): filter chains on postrouting, iptables'
//! `mangle` chains beside input/forward/output, `route` chains, `netdev` ingress, `bridge`
//! tables (the prerouting hook's filter chains go to `prerouting.rs` first). A rule
//! there that can change a packet's fate (a drop, a reject, a reverse-path `fib` drop, a mark,
//! MSS clamping, `notrack`) is refused by name with its line, so nothing is lost in silence; a
//! rule that only counts, logs or accepts (the packet goes on to the next hook) is left out.

use std::collections::BTreeSet;

use serde_json::Value;

use super::owned::owner;
use super::prerouting::early_filter;
use super::tx::*;
use crate::import::model::*;

/// Which hooks the filter and nat translations take: everything else comes here.
fn handled(c: &ChainInfo) -> bool {
    let ip = matches!(c.family.as_str(), "ip" | "ip6" | "inet");
    let hook = c.hook.as_deref().unwrap_or_default();
    ip && ((c.kind == "filter" && matches!(hook, "input" | "forward" | "output")) || c.kind == "nat")
}

impl Tx<'_> {
    /// Refuse what the other hooks' chains do to a packet's fate.
    pub(super) fn other_hooks(&mut self) {
        let mut chains: Vec<ChainInfo> = self.chains.values().filter(|c| c.hook.is_some() && !handled(c)).cloned().collect();
        let (early, mut chains): (Vec<ChainInfo>, Vec<ChainInfo>) = chains.drain(..).partition(|c| early_filter(c) && owner(&c.family, &c.table, &c.name).is_none());
        self.prerouting(early);
        chains.append(&mut std::mem::take(&mut self.passed_over));
        for c in chains {
            if let Some(who) = owner(&c.family, &c.table, &c.name) {
                self.notes.insert(format!("table {} {} (chain {}): {who}'s own, left out — fwc coexists with it", c.family, c.table, c.name));
                continue;
            }
            if c.family == "arp" {
                self.notes.insert(format!("table arp {}: ARP filtering is not imported (it never sees IP packets); keep it in an nftables table of your own", c.table));
                continue;
            }
            let hook = c.hook.clone().unwrap_or_default();
            let place = format!("the {hook} hook ({} {} {}, type {}, priority {})", c.family, c.table, c.name, c.kind, c.prio);
            let mut seen = BTreeSet::new();
            self.refuse_effects(&c, &hook, &place, 0, &mut seen);
            if c.policy == "drop" {
                self.out.refused.push(Refusal {
                    origin: format!("policy drop of chain {} {} {}", c.family, c.table, c.name),
                    what: format!("a drop policy on {place}"),
                    hint: hint_for(&hook, "drop"),
                });
            }
        }
    }

    /// Refuse every rule of `c` (and of the chains it jumps to) that can change a packet's fate.
    fn refuse_effects(&mut self, c: &ChainInfo, hook: &str, place: &str, depth: usize, seen: &mut BTreeSet<String>) {
        if !seen.insert(c.name.clone()) || depth > 16 {
            return;
        }
        for (i, r) in c.rules.iter().enumerate() {
            let expr = r.get("expr").and_then(Value::as_array).cloned().unwrap_or_default();
            let origin = self.origin(c, i);
            if let Some(what) = r.get("comment").and_then(Value::as_str).and_then(|c| c.strip_prefix(crate::import::model::XT_MARK)) {
                self.out.refused.push(Refusal { origin, what: format!("an iptables match nftables cannot express ({what}) on {place}"), hint: hint_for(hook, "xt") });
                continue;
            }
            // Reverse-path filtering and MSS clamping have fwc forms.
            if let Some((kind, rule)) = self.router_form(c, hook, i, &expr, &origin) {
                self.add_to_block(kind, rule);
                continue;
            }
            let mut effect: Option<&str> = None;
            for e in &expr {
                let Some((k, b)) = e.as_object().and_then(|m| m.iter().next()) else { continue };
                match k.as_str() {
                    "match" | "counter" | "log" | "limit" | "accept" | "return" | "continue" => {}
                    "jump" | "goto" => {
                        let target = b.get("target").and_then(Value::as_str).unwrap_or_default().to_string();
                        if owner(&c.family, &c.table, &target).is_some() {
                            continue;
                        }
                        match self.chains.get(&(c.family.clone(), c.table.clone(), target.clone())).cloned() {
                            Some(sub) => self.refuse_effects(&sub, hook, place, depth + 1, seen),
                            None => effect = Some("jump"),
                        }
                    }
                    "drop" | "reject" => effect = Some("drop"),
                    "mangle" => effect = Some("mangle"),
                    _ => effect = Some("other"),
                }
            }
            let Some(kind) = effect else { continue };
            let fib = expr.iter().any(|e| e.pointer("/match/left/fib").is_some());
            let kind = if fib && kind == "drop" { "fib" } else { kind };
            let text = crate::import::words::describe_rule(&expr);
            self.out.refused.push(Refusal { origin, what: format!("`{text}` on {place}"), hint: hint_for(hook, kind) });
        }
    }
}

/// What to do about a refused rule of another hook.
pub(super) fn hint_for(hook: &str, kind: &str) -> String {
    let keep = "or import with --partial and keep it in an nftables table of your own (fwc's table coexists with others)";
    match kind {
        "fib" => format!("fwc's reverse-path filter (`prerouting {{ deny \"spoofed\" rpfilter=\"strict\" }}`) is `fib saddr [. iif] oif missing drop` with a prerouting deny's matches, and this rule is not: rewrite it so, {keep}"),
        "mangle" => format!("fwc does not set marks; its MSS clamping (`forward {{ clamp-mss \"wan\" out=\"ppp0\" }}`) takes SYNs routed through, matched by interfaces and addresses only: {keep}"),
        "drop" if hook == "ingress" => {
            format!("fwc has no ingress hook: a `deny` in the `prerouting` block with `in=` the device drops the same IP packets a little later (after the ingress hook), {keep}")
        }
        "drop" => format!("fwc filters in input, forward and output: write it as a `deny` there, {keep}"),
        _ => format!("fwc has no form for it: {keep}"),
    }
}
