//! Pieces of a user rule's nft rules that the filter chains, the `containers` chain and the
//! forwards share: interface matches, the tails (rate limit, log, counter, verdict) and the
//! writing of one nft rule per tail.

use super::expr::*;
use super::fam::Fam;
use super::names::*;
use super::out::Out;
use super::prelude::*;

/// One nft rule per tail: the rule's matches `expr` then the tail (the last one takes `expr`
/// itself: one tail, the usual case, copies nothing).
pub(super) fn out_rules(out: &mut Out, chain: &str, mut expr: Vec<S>, tails: Vec<Vec<S>>, comment: &str) {
    let n = tails.len();
    for (i, tail) in tails.into_iter().enumerate() {
        let mut e = if i + 1 == n { std::mem::take(&mut expr) } else { expr.clone() };
        e.extend(tail);
        out.rule(chain, e, Some(comment.to_string()));
    }
}

/// `iifname "eth0"`, `iifname != { "eth0", "eth1" }`.
pub(super) fn iface_match(key: MetaKey, negated: bool, names: &[String]) -> S {
    let right = one_or_set(names.iter().map(|i| s(i.clone())).collect()).expect("an interface list names one at least");
    eq_or_ne(negated, meta(key), right)
}

/// The ends of the nft rules of a filter rule (also of a `containers` rule), each appended to
/// the rule's matches: its `rate` limit, log, counter and verdict. Usually one; a log with
/// `log-rate` is a rule of its own before the verdict's (a limit stops the whole rule, and the
/// verdict must apply to every packet); `reject-with="prot-unreachable"` rejects each family
/// with its own ICMP type. A `log` rule logs and has no verdict.
pub(super) fn rule_tails(r: &FilterRule, tcp: bool, fam: Option<Fam>) -> Vec<Vec<S>> {
    let prefix = match &r.log_prefix {
        Some(p) => p.value.clone(),
        None => truncate(format!("fwc {}: ", r.name.value), MAX_LOG_PREFIX),
    };
    let log = || Statement::Log(Some(Log { prefix: Some(prefix.clone().into()), ..Log::new(None) }));
    let log_limit = r.log_rate.as_ref().map(|lr| limit(&lr.value, false, DEFAULT_BURST));
    if r.action == Action::Log {
        return vec![[counter()].into_iter().chain(log_limit).chain([log()]).collect()];
    }
    if r.action == Action::ClampMss {
        return vec![vec![counter(), crate::features::clamp::set_mss(r.mss.as_ref().map(|m| m.value))]];
    }
    let mut tails = Vec::new();
    let mut head = Vec::new();
    if let Some(rate) = &r.rate {
        head.push(limit(&rate.value, false, DEFAULT_BURST));
    }
    if r.log {
        match log_limit {
            Some(l) => tails.push(vec![l, log()]),
            None => head.push(log()),
        }
    }
    head.push(counter());
    let verdicts: Vec<(Option<Fam>, S)> = match r.action {
        Action::Allow => vec![(None, accept())],
        Action::Deny => vec![(None, drop_())],
        Action::Reject => reject_as(r.reject_with.as_ref().map(|w| w.value), tcp),
        Action::Log | Action::ClampMss => unreachable!("handled above"),
    };
    for (only, verdict) in verdicts {
        let mut t = Vec::new();
        match (only, fam) {
            (Some(o), Some(f)) if o != f => continue,
            (Some(o), None) => t.push(eq(meta(MetaKey::Nfproto), s(o.nfproto()))),
            _ => {}
        }
        t.extend(head.iter().cloned());
        t.push(verdict);
        tails.push(t);
    }
    tails
}

/// How a reject answers: `(family it is for, or None for both; statement)`. Without
/// `reject-with`: a TCP reset for a tcp rule, else ICMP(v6) port unreachable. ICMP codes go out
/// as `icmpx` (the kernel sends the packet family's ICMP), but protocol-unreachable, which only
/// ICMP has: ICMPv6 packets get port-unreachable.
pub(super) fn reject_as(with: Option<RejectWith>, tcp: bool) -> Vec<(Option<Fam>, S)> {
    let icmpx = |code| vec![(None, Statement::Reject(Some(Reject::new(Some(RejectType::ICMPX), Some(code)))))];
    match with {
        None => vec![(None, reject(tcp))],
        Some(RejectWith::TcpReset) => vec![(None, reject(true))],
        Some(RejectWith::PortUnreachable) => icmpx(RejectCode::PortUnreach),
        Some(RejectWith::HostUnreachable) => icmpx(RejectCode::HostUnreach),
        Some(RejectWith::NetUnreachable) => icmpx(RejectCode::NoRoute),
        Some(RejectWith::AdminProhibited) => icmpx(RejectCode::AdminProhibited),
        Some(RejectWith::ProtUnreachable) => vec![
            (Some(Fam::V4), Statement::Reject(Some(Reject::new(Some(RejectType::ICMP), Some(RejectCode::ProtUnreach))))),
            (Some(Fam::V6), Statement::Reject(Some(Reject::new(Some(RejectType::ICMPv6), Some(RejectCode::PortUnreach))))),
        ],
    }
}
