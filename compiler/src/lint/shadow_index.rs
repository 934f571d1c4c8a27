//! Index for the `shadowed-rule` lint: for each rule of a chain, the few earlier rules that
//! could cover it, instead of every earlier rule. Rules are bucketed by their exact-match
//! properties (protocol, interfaces, host selector); inside a bucket, each bounded property
//! (ports, source ports, from, to) is indexed by the smallest prefix enclosing its hull, so a
//! query looks up the ancestors of its own prefix in the most selective property.

use std::collections::{BTreeSet, HashMap};

use super::hull::{selector_key, AddrHull, Hull};
use crate::model::{FilterRule, Proto};

/// The exact-match properties a covering rule must have (its own, or "any").
#[derive(Clone, PartialEq, Eq, Hash)]
struct BucketKey<'a> {
    proto: Option<Proto>,
    iif: Option<&'a [String]>,
    oif: Option<&'a [String]>,
    on: Option<String>,
}

/// Where one bounded property of a rule is filed.
enum DimKey {
    /// No restriction ("any").
    Any,
    /// Bounds unknown (a dynamic set): a candidate for every query, and every rule is a
    /// candidate for it.
    Wild,
    /// Smallest enclosing prefixes, one per address family present: (space, length, network).
    Keys(Vec<Prefix>),
}

/// A prefix: (space, length, network left-aligned in 128 bits).
type Prefix = (u8, u8, u128);

/// Address spaces of prefixes: IPv4, IPv6, ports.
const SPACES: usize = 3;
const PORTS: u8 = 2;

/// The smallest prefix enclosing `lo..=hi` in a space of `width` bits, values left-aligned in
/// 128 bits.
fn enclosing(space: u8, width: u32, lo: u128, hi: u128) -> Prefix {
    let (lo, hi) = (lo << (128 - width), hi << (128 - width));
    let len = (lo ^ hi).leading_zeros().min(width);
    (space, len as u8, lo & mask(len as u8))
}

fn mask(len: u8) -> u128 {
    if len == 0 { 0 } else { !0u128 << (128 - u32::from(len)) }
}

fn dim_keys(h: &Hull) -> [DimKey; 4] {
    let ports = |p: Option<(u16, u16)>| match p {
        None => DimKey::Any,
        Some((lo, hi)) => DimKey::Keys(vec![enclosing(PORTS, 16, lo.into(), hi.into())]),
    };
    let addr = |a: &AddrHull| match a {
        AddrHull::Any => DimKey::Any,
        AddrHull::Unknown => DimKey::Wild,
        AddrHull::Bounds(b) => DimKey::Keys(
            (0..2).filter_map(|f| b[f].map(|(lo, hi)| enclosing(f as u8, if f == 0 { 32 } else { 128 }, lo, hi))).collect(),
        ),
    };
    [ports(h.ports), ports(h.sports), addr(&h.from), addr(&h.to)]
}

#[derive(Default)]
struct Dim {
    any: Vec<u32>,
    wild: Vec<u32>,
    lens: [BTreeSet<u8>; SPACES],
    /// (prefix, rule), sorted: the rules filed under one prefix are a run, ascending.
    by_prefix: Vec<(Prefix, u32)>,
}

impl Dim {
    fn under(&self, key: Prefix) -> &[(Prefix, u32)] {
        let lo = self.by_prefix.partition_point(|e| e.0 < key);
        let hi = lo + self.by_prefix[lo..].partition_point(|e| e.0 == key);
        &self.by_prefix[lo..hi]
    }
}

#[derive(Default)]
struct Bucket {
    members: Vec<u32>,
    dims: [Dim; 4],
}

pub(super) struct ShadowIndex<'a, 'h> {
    buckets: HashMap<BucketKey<'a>, Bucket>,
    keys: Vec<BucketKey<'a>>,
    hulls: &'h [Hull],
}

impl<'a, 'h> ShadowIndex<'a, 'h> {
    /// Files every rule that can cover another (no `rate=`) of one chain.
    pub(super) fn new(rules: &[&'a FilterRule], hulls: &'h [Hull]) -> Self {
        let mut idx = ShadowIndex { buckets: HashMap::new(), keys: Vec::with_capacity(rules.len()), hulls };
        for (i, (r, h)) in rules.iter().zip(hulls).enumerate() {
            let key = BucketKey {
                proto: r.proto.as_ref().map(|p| p.value),
                iif: r.iif.as_ref().map(|s| s.value.as_slice()),
                oif: r.oif.as_ref().map(|s| s.value.as_slice()),
                on: selector_key(&r.on),
            };
            if !h.rate {
                let dims = dim_keys(h);
                let b = idx.buckets.entry(key.clone()).or_default();
                b.members.push(i as u32);
                for (d, k) in b.dims.iter_mut().zip(&dims) {
                    match k {
                        DimKey::Any => d.any.push(i as u32),
                        DimKey::Wild => d.wild.push(i as u32),
                        DimKey::Keys(ks) => {
                            for &(s, len, net) in ks {
                                d.lens[s as usize].insert(len);
                                d.by_prefix.push(((s, len, net), i as u32));
                            }
                        }
                    }
                }
            }
            idx.keys.push(key);
        }
        for b in idx.buckets.values_mut() {
            for d in &mut b.dims {
                d.by_prefix.sort_unstable();
            }
        }
        idx
    }

    /// The buckets whose rules may cover rule `j`.
    fn buckets_for(&self, j: usize) -> Vec<&Bucket> {
        let k = &self.keys[j];
        let mut protos = vec![None];
        if let Some(p) = k.proto {
            protos.push(Some(p));
            if matches!(p, Proto::Tcp | Proto::Udp) {
                protos.push(Some(Proto::Both));
            }
        }
        let opt = |v: Option<&'a [String]>| if v.is_some() { vec![None, v] } else { vec![None] };
        let ons = if k.on.is_some() { vec![None, k.on.clone()] } else { vec![None] };
        let mut out = Vec::new();
        for &proto in &protos {
            for &iif in &opt(k.iif) {
                for &oif in &opt(k.oif) {
                    for on in &ons {
                        if let Some(b) = self.buckets.get(&BucketKey { proto, iif, oif, on: on.clone() }) {
                            out.push(b);
                        }
                    }
                }
            }
        }
        out
    }

    /// The first rule before `j` that covers it. Per bucket that may hold one, the index
    /// hands `test` the rules before `j` (and before any cover already found) in ascending
    /// order, a superset of those that cover `j`; `test` returns the first that does.
    pub(super) fn first_cover(&self, j: usize, mut test: impl FnMut(&[u32]) -> Option<u32>) -> Option<usize> {
        let mut best = j as u32;
        let keys = dim_keys(&self.hulls[j]);
        for b in self.buckets_for(j) {
            let Some(fewest) = b.dims.iter().zip(&keys).map(|(d, k)| Candidates::of(b, d, k)).min_by_key(Candidates::len) else { continue };
            if let Some(i) = test(&fewest.before(best)) {
                best = best.min(i);
            }
        }
        (best < j as u32).then_some(best as usize)
    }
}

/// The rules of a bucket that may cover a query in one property: sorted lists of rules, and
/// runs of rules filed under one prefix.
struct Candidates<'d> {
    plain: Vec<&'d [u32]>,
    filed: Vec<&'d [(Prefix, u32)]>,
}

impl<'d> Candidates<'d> {
    fn of(b: &'d Bucket, d: &'d Dim, k: &DimKey) -> Candidates<'d> {
        match k {
            DimKey::Any => Candidates { plain: vec![&d.any, &d.wild], filed: vec![] },
            DimKey::Keys(ks) if !ks.is_empty() => {
                let (s, qlen, qnet) = ks[0];
                let filed = d.lens[s as usize].range(..=qlen).map(|&len| d.under((s, len, qnet & mask(len)))).collect();
                Candidates { plain: vec![&d.any, &d.wild], filed }
            }
            // Unknown or empty bounds: every rule of the bucket.
            _ => Candidates { plain: vec![&b.members], filed: vec![] },
        }
    }

    fn len(&self) -> usize {
        self.plain.iter().map(|l| l.len()).sum::<usize>() + self.filed.iter().map(|l| l.len()).sum::<usize>()
    }

    /// The candidates before rule `best`, ascending, each once.
    fn before(&self, best: u32) -> Vec<u32> {
        let mut out: Vec<u32> = self.plain.iter().flat_map(|l| l[..l.partition_point(|&i| i < best)].iter().copied()).collect();
        out.extend(self.filed.iter().flat_map(|l| l[..l.partition_point(|e| e.1 < best)].iter().map(|e| e.1)));
        out.sort_unstable();
        out.dedup();
        out
    }
}
