//! Address families and normalised address / port lists: sets and literals become merged
//! intervals per family, rendered as nft values (address, prefix or range).

use super::expr::*;
use super::fam::*;
use super::names::*;
use super::prelude::*;

/// Sorted, merged (overlapping or adjacent joined) intervals, per family.
pub(super) fn merged<'a>(elems: impl IntoIterator<Item = &'a AddrElem>) -> [Vec<(u128, u128)>; 2] {
    crate::place::setlayout::merged(elems)
}

/// One interval as an nft value: an address, a prefix or a range.
pub(super) fn interval_expr(fam: Fam, lo: u128, hi: u128) -> E {
    if lo == hi {
        return s(fam.addr(lo).to_string());
    }
    match fam.prefix_len(lo, hi) {
        Some(len) => prefix(fam.addr(lo).to_string(), len),
        None => range(s(fam.addr(lo).to_string()), s(fam.addr(hi).to_string())),
    }
}

/// Elements of the two halves of a set.
pub(super) fn set_elems(elems: &[AddrElem]) -> [Vec<E>; 2] {
    let m = merged(elems);
    [
        m[0].iter().map(|&(lo, hi)| interval_expr(Fam::V4, lo, hi)).collect(),
        m[1].iter().map(|&(lo, hi)| interval_expr(Fam::V6, lo, hi)).collect(),
    ]
}

/// One way an address can match: `<left> == right`, or `<left> & mask == right` (a lookup in
/// the hash set of one prefix length). The alternatives of one match never overlap (the set's
/// prefixes are disjoint), so a packet matches at most one of them.
#[derive(Debug, Clone)]
pub(super) struct AddrAlt {
    pub mask: Option<String>,
    pub right: E,
    /// A shard of a hash set: the prefix an address must be in to be in this shard, compared
    /// before the lookup where the rule is one of the set's own copies ([`addr_ways`]); users
    /// that only take [`Self::on`] look the address up in every shard (correct, slower).
    pub guard: Option<E>,
}

impl AddrAlt {
    fn exact(right: E) -> AddrAlt {
        AddrAlt { mask: None, right, guard: None }
    }
    /// The match statement on `left` (a payload or `ct original` address).
    pub(super) fn on(&self, left: E) -> S {
        self.on_or_off(false, left)
    }

    /// [`Self::on`], or its opposite (`!=`: the address is not in this alternative).
    pub(super) fn on_or_off(&self, negated: bool, left: E) -> S {
        match &self.mask {
            Some(m) => eq_or_ne(negated, and(left, s(m.clone())), self.right.clone()),
            None => eq_or_ne(negated, left, self.right.clone()),
        }
    }
}

/// The alternatives of an address match, per family (empty = no address of that family). A
/// rule is emitted once per combination of alternatives of its matches.
pub(super) type AddrParts = [Vec<AddrAlt>; 2];

pub(super) fn addr_parts(plan: &HostPlan, m: &AddrMatch) -> AddrParts {
    match m {
        AddrMatch::Set(name) => {
            let set = plan.set(name);
            match plan.layouts.get(name.as_str()) {
                // A dynamic set may hold either family at run time: match both halves.
                None if set.is_some_and(|s| s.dynamic.is_some()) => {
                    [Fam::V4, Fam::V6].map(|fam| vec![AddrAlt::exact(s(format!("@{}", set_name(name, fam == Fam::V6))))])
                }
                None => [Vec::new(), Vec::new()],
                Some(layout) => [Fam::V4, Fam::V6].map(|fam| {
                    let f = &layout.fams[fam.idx()];
                    let v6 = fam == Fam::V6;
                    match &f.kind {
                        _ if f.merged.is_empty() => Vec::new(),
                        LayoutKind::Interval => vec![AddrAlt::exact(s(format!("@{}", set_name(name, v6))))],
                        LayoutKind::Hash { targets, shards, .. } => targets
                            .iter()
                            .zip(shards)
                            .flat_map(|(&(len, _), sh)| {
                                let mask = (len < fam.bits()).then(|| f.mask(len).to_string());
                                match sh {
                                    None => vec![AddrAlt { mask, right: s(format!("@{}", hash_set_name(name, v6, len))), guard: None }],
                                    Some(sh) => sh
                                        .parts
                                        .iter()
                                        .map(|&(i, net, _)| AddrAlt {
                                            mask: mask.clone(),
                                            right: s(format!("@{}", shard_set_name(name, v6, len, i))),
                                            guard: Some(prefix(fam.addr(net).to_string(), sh.len)),
                                        })
                                        .collect(),
                                }
                            })
                            .collect(),
                    }
                }),
            }
        }
        AddrMatch::Literal(elems) => {
            let [v4, v6] = set_elems(elems);
            [one_or_set(v4), one_or_set(v6)].map(|e| e.map(AddrAlt::exact).into_iter().collect())
        }
    }
}

/// The one alternative of an address match in `fam`, for rules that must stay one nft rule
/// (forwards, shapes: `crate::place::select` keeps the sets they use as interval sets).
pub(super) fn one_alt(p: &AddrParts, fam: Fam) -> Option<&AddrAlt> {
    let v = &p[fam.idx()];
    assert!(v.len() <= 1, "a set used by a forward or shape has one lookup per family");
    v.first()
}

/// The ways an optional address match on `field` (`saddr`/`daddr`) holds in `fam`, each the
/// statements of one nft rule: one per alternative; negated, one rule whose statements say
/// the address is in none of them. `[[]]` without the match.
pub(super) fn addr_ways(p: Option<&AddrParts>, negated: bool, fam: Fam, field: &'static str) -> Vec<Vec<S>> {
    let Some(p) = p else { return vec![Vec::new()] };
    let alts = &p[fam.idx()];
    if negated {
        vec![alts.iter().map(|a| a.on_or_off(true, payload(fam.proto(), field))).collect()]
    } else {
        alts.iter()
            .map(|a| {
                let guard = a.guard.as_ref().map(|g| eq(payload(fam.proto(), field), g.clone()));
                guard.into_iter().chain([a.on(payload(fam.proto(), field))]).collect()
            })
            .collect()
    }
}

/// The alternatives of an optional address match in `fam`: `[None]` without the match.
pub(super) fn alts(p: Option<&AddrParts>, fam: Fam) -> Vec<Option<&AddrAlt>> {
    match p {
        None => vec![None],
        Some(p) => p[fam.idx()].iter().map(Some).collect(),
    }
}

/// Which address families a rule with these address matches needs: `[None]` (one `inet` rule)
/// without address matches, else each family every match has addresses for (maybe none).
pub(super) fn families(parts: &[&AddrParts], only: Option<Fam>) -> Vec<Option<Fam>> {
    if parts.is_empty() {
        return vec![None];
    }
    FAMS.into_iter()
        .filter(|f| only.is_none_or(|o| o == *f))
        .filter(|f| parts.iter().all(|p| !p[f.idx()].is_empty()))
        .map(Some)
        .collect()
}
