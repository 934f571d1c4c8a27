//! Reading `nft monitor trace`: its lines grouped by packet (a trace id does not name one
//! packet), and each traced packet's outcome.

use std::collections::BTreeMap;
use std::net::IpAddr;

use fwc_compiler::artifacts::QOS_MARK_MASK;
use fwc_compiler::eval::Verdict;

/// What the kernel did to one flow's first packet.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KernelOutcome {
    pub verdict: Verdict,
    /// The comment (`fwc:<kind>:<name>`) of the rule that decided; `None` for a built-in rule
    /// or a policy.
    pub identity: Option<String>,
    /// True when a chain policy decided.
    pub policy: bool,
    /// Destination as the input/forward filter chain saw it (after any DNAT).
    pub seen_dst: Option<(IpAddr, u16)>,
    /// The QoS class bits of the packet mark as the first packet left (`qos_apply`, original
    /// direction); `None` when it carries no class or never left (delivered here, dropped).
    pub qos_mark: Option<u32>,
    /// The comment of the user's `masquerade` / `snat` rule that translated the source.
    pub snat_rule: Option<String>,
    /// The source address the connection was translated to (its conntrack entry's reply
    /// tuple), when source NAT changed it.
    pub nat_source: Option<IpAddr>,
    /// The raw trace lines of this packet, for reports.
    pub trace: Vec<String>,
}

/// Source MAC of the marker frames: the trace table traces them and drops them before
/// conntrack and fwc's rules see them, so they change no state a flow could meet.
pub(super) const MARKER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0xff, 0xfe];
pub(super) const TRACE_TABLE: &str = "fwc_trace";
pub(super) const TRACE_CHAIN: &str = "pre";

/// `… tcp sport 40000 …` -> 40000 (the word after `key`).
pub(super) fn word_after<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let i = line.find(key)?;
    line[i + key.len()..].split_whitespace().next()
}

/// `nft monitor trace` lines grouped by packet, in order.
///
/// A trace id does not name one packet: the kernel derives it from the packet buffer's
/// address, the flow hash and the input interface, and two ICMP echoes between the same
/// addresses (no ports, so the same flow hash) get the same id whenever the second one's
/// buffer is allocated where the first one's was just freed. Every packet's trace starts in
/// the trace table's chain, so a packet line there starts a new packet even under an id
/// already seen.
pub(super) fn packets(text: &str) -> Vec<Vec<&str>> {
    let start = format!("inet {TRACE_TABLE} {TRACE_CHAIN} packet: ");
    let mut packets: Vec<Vec<&str>> = Vec::new();
    let mut current: BTreeMap<&str, usize> = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("trace id ") else { continue };
        let Some((id, what)) = rest.split_once(' ') else { continue };
        match current.get(id) {
            Some(&k) if !what.starts_with(&start) => packets[k].push(line),
            _ => {
                current.insert(id, packets.len());
                packets.push(vec![line]);
            }
        }
    }
    packets
}

/// Read each traced packet's outcome, identified by its source port (ICMP: echo identifier).
pub(super) fn parse_trace(text: &str, table: &fwc_compiler::eval::nft::Table) -> BTreeMap<u16, KernelOutcome> {
    let hook_of = |chain: &str| table.chains.get(chain).and_then(|c| c.hook.as_ref()).map(|h| (h.hook.clone(), h.kind.clone()));
    let marker_mac = format!("ether saddr {} ", MARKER_MAC.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":"));
    let mut out = BTreeMap::new();
    for lines in packets(text) {
        let Some(first) = lines.iter().find(|l| l.contains(" packet: ")) else { continue };
        if first.contains(&marker_mac) {
            continue;
        }
        let Some(sport) = word_after(first, "tcp sport ")
            .or_else(|| word_after(first, "udp sport "))
            .or_else(|| word_after(first, "icmp id "))
            .or_else(|| word_after(first, "icmpv6 id "))
            .and_then(|w| w.parse::<u16>().ok())
            // nft 1.0.6 prints an ICMPv6 echo's identifier and sequence as one 32-bit
            // `icmpv6 parameter-problem` word.
            .or_else(|| {
                let echo = first.contains("icmpv6 type echo-") || first.contains("icmpv6 type destination-unreachable");
                word_after(first, "icmpv6 parameter-problem ").filter(|_| echo).and_then(|w| w.parse::<u32>().ok()).map(|n| (n >> 16) as u16)
            })
            .or_else(|| other_protocol(first).then(|| word_after(first, "ip id ").or_else(|| word_after(first, "ip6 flowlabel ")).and_then(|w| w.parse().ok())).flatten())
            .or_else(|| first.contains("icmpv6 type nd-").then(|| word_after(first, "ip6 flowlabel ").and_then(|w| w.parse().ok())).flatten())
        else {
            continue;
        };
        let mut verdict = Verdict::Accept;
        let mut identity = None;
        let mut policy = false;
        let mut decided = false;
        let mut seen_dst = None;
        let mut qos_mark = None;
        let mut snat_rule = None;
        for l in lines.iter().filter(|l| l.contains(" inet fwc ")) {
            let after = &l[l.find(" inet fwc ").expect("filtered") + " inet fwc ".len()..];
            let Some((chain, what)) = after.split_once(' ') else { continue };
            let hook = hook_of(chain);
            let filter_hook = hook.as_ref().is_some_and(|(h, k)| k == "filter" && (h == "input" || h == "forward"));
            if what.starts_with("packet: ") && filter_hook && seen_dst.is_none() {
                let addr = word_after(what, "ip daddr ").or_else(|| word_after(what, "ip6 daddr ")).and_then(|w| w.parse().ok());
                let port = word_after(what, "tcp dport ")
                    .or_else(|| word_after(what, "udp dport "))
                    .and_then(|w| w.parse().ok())
                    .or_else(|| word_after(what, "icmp type ").and_then(|t| icmp_type_number(false, t)))
                    .or_else(|| word_after(what, "icmpv6 type ").and_then(|t| icmp_type_number(true, t)))
                    // A protocol without ports: the flow's "port" is 0.
                    .or_else(|| other_protocol(what).then_some(0));
                if let (Some(a), Some(p)) = (addr, port) {
                    seen_dst = Some((a, p));
                }
            }
            // nft prints the packet mark on the policy line of a chain that changed it.
            if let Some(m) = word_after(what, "meta mark 0x").and_then(|w| u32::from_str_radix(w, 16).ok()) {
                qos_mark = Some(m & QOS_MARK_MASK).filter(|&b| b != 0);
            }
            let comment = word_after(what, "comment ").map(|c| c.trim_matches('"').to_string());
            let nat_postrouting = hook.as_ref().is_some_and(|(h, k)| k == "nat" && h == "postrouting");
            let user_snat = comment.as_deref().and_then(fwc_compiler::artifacts::parse_rule_comment).is_some_and(|(k, _)| {
                matches!(k, fwc_compiler::artifacts::RuleKind::Masquerade | fwc_compiler::artifacts::RuleKind::Snat)
            });
            if nat_postrouting && user_snat && what.ends_with("(verdict accept)") && snat_rule.is_none() {
                snat_rule = comment.clone();
            }
            // fwc's rules standing for a chain's policy (`policy=reject`): `fwc:chain:<chain>`.
            let policy_rule = comment.as_deref().and_then(fwc_compiler::artifacts::parse_rule_comment).is_some_and(|(k, _)| k == fwc_compiler::artifacts::RuleKind::Chain);
            let is_drop = what.ends_with("(verdict drop)") || what.trim_end() == "policy drop";
            if is_drop && !decided {
                verdict = if what.contains("reject") { Verdict::Reject } else { Verdict::Drop };
                policy = what.starts_with("policy") || policy_rule;
                identity = if what.starts_with("policy") { None } else { comment.clone() };
                decided = true;
            }
            if !decided && filter_hook {
                if what.ends_with("(verdict accept)") {
                    identity = comment;
                    policy = false;
                } else if what.trim_end() == "policy accept" {
                    identity = None;
                    policy = true;
                }
            }
        }
        out.insert(sport, KernelOutcome { verdict, identity, policy, seen_dst, qos_mark, snat_rule, nat_source: None, trace: lines.iter().map(|l| l.to_string()).collect() });
    }
    out
}

/// Is the packet a trace line shows of a protocol other than TCP, UDP, ICMP and ICMPv6?
pub(super) fn other_protocol(line: &str) -> bool {
    (line.contains(" ip protocol ") || line.contains(" ip6 nexthdr ")) && !["tcp ", "udp ", "icmp"].iter().any(|w| line.contains(w))
}

/// An ICMP type as `nft monitor trace` prints it (a name, or a number) -> its number.
pub(super) fn icmp_type_number(v6: bool, word: &str) -> Option<u16> {
    word.parse::<u8>().ok().or_else(|| fwc_compiler::read::units::icmp_type_code(v6, word)).map(u16::from)
}
