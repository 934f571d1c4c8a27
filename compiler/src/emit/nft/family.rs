//! Address families and normalised address / port lists: sets and literals become merged
//! intervals per family, rendered as nft values (address, prefix or range).

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Fam {
    V4,
    V6,
}

pub(super) const FAMS: [Fam; 2] = [Fam::V4, Fam::V6];

impl Fam {
    pub(super) fn of(ip: &IpAddr) -> Fam {
        if ip.is_ipv4() {
            Fam::V4
        } else {
            Fam::V6
        }
    }
    pub(super) fn idx(self) -> usize {
        self as usize
    }
    /// Payload protocol name: `ip` / `ip6`.
    pub(super) fn proto(self) -> &'static str {
        match self {
            Fam::V4 => "ip",
            Fam::V6 => "ip6",
        }
    }
    pub(super) fn nat(self) -> NATFamily {
        match self {
            Fam::V4 => NATFamily::IP,
            Fam::V6 => NATFamily::IP6,
        }
    }
    pub(super) fn nfproto(self) -> &'static str {
        match self {
            Fam::V4 => "ipv4",
            Fam::V6 => "ipv6",
        }
    }
    pub(super) fn bits(self) -> u32 {
        match self {
            Fam::V4 => 32,
            Fam::V6 => 128,
        }
    }
    /// The prefix length of the interval `lo..=hi` if it is exactly one network.
    pub(super) fn prefix_len(self, lo: u128, hi: u128) -> Option<u32> {
        let diff = lo ^ hi;
        let host_bits = 128 - diff.leading_zeros();
        let is_prefix = diff.count_ones() == host_bits && lo & diff == 0;
        (is_prefix && host_bits <= self.bits()).then(|| self.bits() - host_bits)
    }
    pub(super) fn addr(self, v: u128) -> IpAddr {
        match self {
            Fam::V4 => IpAddr::V4(Ipv4Addr::from(v as u32)),
            Fam::V6 => IpAddr::V6(Ipv6Addr::from(v)),
        }
    }
}

pub(super) fn ip_u128(ip: &IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(*a)),
        IpAddr::V6(a) => u128::from(*a),
    }
}

/// An address element as an inclusive interval of its family.
pub(super) fn interval(e: &AddrElem) -> (Fam, u128, u128) {
    match e {
        AddrElem::Net(n) => {
            let fam = Fam::of(&n.addr());
            (fam, ip_u128(&n.network()), ip_u128(&n.broadcast()))
        }
        AddrElem::Range(a, b) => {
            let (x, y) = (ip_u128(a), ip_u128(b));
            (Fam::of(a), x.min(y), x.max(y))
        }
    }
}

/// Sorted, merged (overlapping or adjacent joined) intervals, per family.
pub(super) fn merged<'a>(elems: impl IntoIterator<Item = &'a AddrElem>) -> [Vec<(u128, u128)>; 2] {
    let mut out: [Vec<(u128, u128)>; 2] = [Vec::new(), Vec::new()];
    for e in elems {
        let (fam, lo, hi) = interval(e);
        out[fam.idx()].push((lo, hi));
    }
    for list in &mut out {
        // In place: a million-element set file must not need a second copy.
        list.sort_unstable();
        let mut w = 0;
        for r in 0..list.len() {
            let (lo, hi) = list[r];
            if w > 0 && lo <= list[w - 1].1.saturating_add(1) {
                list[w - 1].1 = list[w - 1].1.max(hi);
            } else {
                list[w] = (lo, hi);
                w += 1;
            }
        }
        list.truncate(w);
        list.shrink_to_fit();
    }
    out
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

/// Right-hand side of an address match, per family (None = no address of that family).
pub(super) type AddrParts = [Option<E>; 2];

pub(super) fn addr_parts(plan: &HostPlan, m: &AddrMatch) -> AddrParts {
    match m {
        AddrMatch::Set(name) => {
            // A dynamic set may hold either family at run time: match both halves.
            let set = plan.set(name);
            let dynamic = set.is_some_and(|s| s.dynamic.is_some());
            let has = |fam: Fam| dynamic || set.is_some_and(|s| s.elements.iter().any(|e| e.value.is_ipv4() == (fam == Fam::V4)));
            [Fam::V4, Fam::V6].map(|fam| has(fam).then(|| s(format!("@{}", set_name(name, fam == Fam::V6)))))
        }
        AddrMatch::Literal(elems) => {
            let [v4, v6] = set_elems(elems);
            [one_or_set(v4), one_or_set(v6)]
        }
    }
}

pub(super) fn one_or_set(mut v: Vec<E>) -> Option<E> {
    match v.len() {
        0 => None,
        1 => v.pop(),
        _ => Some(set(v)),
    }
}

/// Sorted, merged port ranges.
pub(super) fn merged_ports(ports: &[PortRange]) -> Vec<PortRange> {
    let mut v: Vec<PortRange> = ports.iter().map(|p| PortRange { lo: p.lo.min(p.hi), hi: p.lo.max(p.hi) }).collect();
    v.sort();
    let mut out: Vec<PortRange> = Vec::with_capacity(v.len());
    for p in v {
        match out.last_mut() {
            Some(last) if u32::from(p.lo) <= u32::from(last.hi) + 1 => last.hi = last.hi.max(p.hi),
            _ => out.push(p),
        }
    }
    out
}

pub(super) fn port_expr(p: PortRange) -> E {
    if p.is_single() {
        n(u32::from(p.lo))
    } else {
        range(n(u32::from(p.lo)), n(u32::from(p.hi)))
    }
}

pub(super) fn ports_expr(ports: &[PortRange]) -> Option<E> {
    one_or_set(merged_ports(ports).into_iter().map(port_expr).collect())
}

/// Which address families a rule with these address matches needs: `[None]` (one `inet` rule)
/// without address matches, else each family every match has addresses for (maybe none).
pub(super) fn families(parts: &[&AddrParts], only: Option<Fam>) -> Vec<Option<Fam>> {
    if parts.is_empty() {
        return vec![None];
    }
    FAMS.into_iter()
        .filter(|f| only.is_none_or(|o| o == *f))
        .filter(|f| parts.iter().all(|p| p[f.idx()].is_some()))
        .map(Some)
        .collect()
}
