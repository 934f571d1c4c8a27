//! Per-source limits in nft (see [`crate::features::persource`] for the design): the dynamic
//! sets that track sources, and the guard rules — `update`/`add` with a `limit`/`ct count`
//! per element, then a fail-closed rule for a source the full set could not take.

use super::expr::*;
use super::fam::*;
use super::out::Out;
use super::prelude::*;
use crate::features::persource::{self as ps, Kind};

/// One guard rule: matches and statements, and the set statement's per-element statements
/// (`"stmt"` of the JSON `set` statement, which the `nftables` crate cannot express).
pub(super) struct Guard {
    pub expr: Vec<S>,
    pub elem_stmts: Option<Value>,
}

/// The sets of every per-source limit of the host (filter rules, then kernel forwards).
pub(super) fn declare_sets(out: &mut Out, plan: &HostPlan) {
    for c in &plan.chains {
        for r in &c.rules {
            if let Some(p) = &r.per_source {
                declare(out, c.kind.nft_name(), &r.name.value, p);
            }
        }
    }
    for f in &plan.kernel_forwards {
        if let Some(p) = &f.per_source {
            declare(out, "fwd", &f.name.value, p);
        }
    }
}

/// Flags as nft lists them (nft marks a set `dynamic` itself when a rule adds to it; its JSON
/// listing shows `timeout` only), so the runtime's comparison of declarations holds.
fn declare(out: &mut Out, owner: &str, rule: &str, p: &PerSource) {
    for fam in FAMS {
        let v6 = fam == Fam::V6;
        let ty = if v6 { "ipv6_addr" } else { "ipv4_addr" };
        if let Some(r) = &p.rate {
            out.raw_set(json!({
                "family": "inet", "table": NFT_TABLE, "name": ps::set_name(owner, rule, Kind::Rate, v6),
                "type": ty, "flags": ["timeout"], "size": p.size, "timeout": ps::rate_timeout_s(&r.value),
            }));
        }
        if p.max_conns.is_some() {
            // No timeout: the kernel refuses `ct count` in a set with timeouts; its garbage
            // collection removes an element once its source has no connection left.
            out.raw_set(json!({
                "family": "inet", "table": NFT_TABLE, "name": ps::set_name(owner, rule, Kind::Conns, v6),
                "type": ty, "size": p.size,
            }));
        }
    }
}

/// The source key of family `fam`: `ip saddr` (masked when the prefix is shorter than the
/// address).
fn key(fam: Fam, p: &PerSource) -> E {
    let a = payload(fam.proto(), "saddr");
    match fam {
        Fam::V4 if p.prefix4 < 32 => and(a, s(ps::mask4(p.prefix4).to_string())),
        Fam::V6 if p.prefix6 < 128 => and(a, s(ps::mask6(p.prefix6).to_string())),
        _ => a,
    }
}

/// The guard rules of one limit set, for packets that already passed `matches` (which select
/// the new connections of the rule in family `fam`; `None`: both families, a `meta nfproto`
/// match is added per family). `tcp`: a TCP-only rule (refusals answer with a reset).
pub(super) fn guards(matches: &[S], fam: Option<Fam>, owner: &str, rule: &str, p: &PerSource, tcp: bool) -> Vec<Guard> {
    let fams: Vec<(Fam, bool)> = match fam {
        Some(f) => vec![(f, false)],
        None => FAMS.iter().map(|f| (*f, true)).collect(),
    };
    let mut out = Vec::new();
    for (fam, add_nfproto) in fams {
        let v6 = fam == Fam::V6;
        let mut base: Vec<S> = matches.to_vec();
        if add_nfproto {
            base.push(eq(meta(MetaKey::Nfproto), s(fam.nfproto())));
        }
        let mut pair = |kind: Kind, elem_stmt: Value, refuse: S| {
            let set = ps::set_name(owner, rule, kind, v6);
            let op = if kind == Kind::Rate { stmt::SetOp::Update } else { stmt::SetOp::Add };
            let mut e = base.clone();
            e.push(Statement::Set(stmt::Set { op, elem: key(fam, p), set: format!("@{set}").into() }));
            e.push(counter());
            e.push(refuse.clone());
            out.push(Guard { expr: e, elem_stmts: Some(json!([elem_stmt])) });
            // Fail closed: a source the full set could not take has no element here.
            let mut e = base.clone();
            e.push(m(key(fam, p), Operator::NEQ, s(format!("@{set}"))));
            e.push(counter());
            e.push(refuse);
            out.push(Guard { expr: e, elem_stmts: None });
        };
        if let Some(r) = &p.rate {
            let l = json!({"limit": {"rate": r.value.count, "burst": ps::burst(&r.value), "per": r.value.per.as_str(), "inv": true}});
            pair(Kind::Rate, l, drop_());
        }
        if let Some(mc) = &p.max_conns {
            let c = json!({"ct count": {"val": mc.value, "inv": true}});
            pair(Kind::Conns, c, reject(tcp));
        }
    }
    out
}

/// The per-source guards of a filter rule, before its own nft rules: the rule's matches of
/// this combination and its connection states (`state=`, else `ct state new`).
pub(super) fn filter_guards(out: &mut Out, r: &FilterRule, fam: Option<Fam>, matches: &[S], comment: &str) {
    let Some(p) = &r.per_source else { return };
    let mut m = matches.to_vec();
    if r.state.is_none() && r.rate.is_none() {
        m.push(ct_state(&["new"]));
    }
    let tcp = r.proto.as_ref().is_some_and(|x| x.value == Proto::Tcp);
    for g in guards(&m, fam, r.chain.nft_name(), &r.name.value, p, tcp) {
        out.rule_with_elem_stmts(r.chain.nft_name(), g.expr, Some(comment.to_string()), g.elem_stmts);
    }
}
