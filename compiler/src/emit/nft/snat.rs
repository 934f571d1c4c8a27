//! Source NAT of the user's `masquerade` and `snat` rules: the nat `postrouting` chain (shared
//! with fwc's masquerade of its own forwards, which comes first), one rule per fwc rule and
//! address family, in file order (the first NAT statement that matches a connection wins).

use super::expr::*;
use super::fam::*;
use super::family::*;
use super::names::*;
use super::out::*;
use super::prelude::*;
use super::rule_parts::iface_match;

/// The nat postrouting chain, when there are no kernel forwards to declare it.
pub(super) fn declare_snat_chain(out: &mut Out) {
    out.chain(chains::POSTROUTING, Some((NfChainType::NAT, NfHook::Postrouting, 100, NfChainPolicy::Accept)));
}

/// Every `masquerade` / `snat` rule of the host, after fwc's own masquerade.
pub(super) fn snat_rules(out: &mut Out, plan: &HostPlan) {
    for r in &plan.snats {
        snat_rule(out, plan, r);
    }
}

/// `oifname "eth0" ip saddr 10.8.0.0/16 counter snat ip to 198.18.0.1` and the like. A rule
/// without addresses is one `inet` rule (masquerade), or one for `to=`'s family (snat).
fn snat_rule(out: &mut Out, plan: &HostPlan, r: &SnatRule) {
    let comment = rule_comment(r.kind.rule_kind(), &r.name.value);
    let proto = r.proto.as_ref().map(|p| p.value);
    let from = r.from.as_ref().map(|m| addr_parts(plan, &m.value));
    let except = r.from_except.as_ref().map(|m| addr_parts(plan, &m.value));
    let dst = r.dst.as_ref().map(|m| addr_parts(plan, &m.value));
    // `from-except=` decides the families only without `from=` (in a family it has no
    // addresses for, it leaves nothing out).
    let parts: Vec<&AddrParts> = from.iter().chain(dst.iter()).chain(except.iter().filter(|_| from.is_none())).collect();
    let neg = r.negate;
    let only = match (&r.to_addr, proto) {
        (Some(a), _) => Some(Fam::of(&a.value)),
        (None, Some(Proto::Icmp)) => Some(Fam::V4),
        (None, Some(Proto::Icmpv6)) => Some(Fam::V6),
        _ => None,
    };
    let fams = if parts.is_empty() { vec![r.to_addr.as_ref().map(|a| Fam::of(&a.value))] } else { families(&parts, only) };
    let l4 = l4_match(proto, r.ports.as_ref().map(|p| p.value.as_slice()), None);
    for fam in fams {
        // One nft rule per combination of the address matches' alternatives (a big set is one
        // hash set per prefix length); they never overlap. A negated match is one way: the
        // address is in none of them.
        let (fa, da, ea) = match fam {
            Some(f) => (addr_ways(from.as_ref(), neg.from, f, "saddr"), addr_ways(dst.as_ref(), neg.to, f, "daddr"), addr_ways(except.as_ref(), true, f, "saddr")),
            None => (vec![Vec::new()], vec![Vec::new()], vec![Vec::new()]),
        };
        for fv in &fa {
            for dv in &da {
                let mut expr = Vec::new();
                if let (true, Some(f)) = (parts.is_empty(), fam) {
                    expr.push(eq(meta(MetaKey::Nfproto), s(f.nfproto())));
                }
                if let Some(i) = &r.iif {
                    expr.push(iface_match(MetaKey::Iifname, neg.iif, &i.value));
                }
                if let Some(o) = &r.oif {
                    expr.push(eq(meta(MetaKey::Oifname), s(o.value.clone())));
                }
                expr.extend(l4.iter().cloned());
                expr.extend(fv.iter().cloned());
                expr.extend(ea.iter().flatten().cloned());
                expr.extend(dv.iter().cloned());
                expr.push(counter());
                expr.push(match (&r.to_addr, fam) {
                    (Some(a), Some(f)) => {
                        Statement::SNAT(Some(NAT { addr: Some(s(a.value.to_string())), family: Some(f.nat()), port: None, flags: None }))
                    }
                    _ => Statement::Masquerade(None),
                });
                out.rule(chains::POSTROUTING, expr, Some(comment.clone()));
            }
        }
    }
}
