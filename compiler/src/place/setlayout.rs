//! How a static address set is laid out in the kernel, chosen from its data: small
//! sets stay one interval set per family; big ones become plain hash sets, one per prefix
//! length (after controlled prefix expansion), matched with masked lookups; a hash set above
//! [`SHARD_MAX`] elements is split into shards by address bits, each its own kernel set. Pure.
//!
//! Why: nft reads back the elements of every interval set in the namespace before any `add
//! element`/`delete element` (anyone's), and the kernel's interval-set dump is quadratic: with a
//! 1M-element interval set loaded, every fail2ban ban on the host took ~75 s. A hash set is
//! never read back, and a one-element change costs the same at 10 or 10M elements.
//! `docs/rules.md` ("How sets are loaded") and `docs/performance.md` ("Sets") have the numbers.

use crate::model::AddrElem;
pub use crate::place::merged::Merged;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Up to this many prefixes (per family) a static set stays an interval set: one lookup per
/// packet, and reading it back costs nft nothing worth measuring.
pub const INTERVAL_MAX: u64 = 4096;
/// More masked lookups than this per packet after expansion: an interval set after all.
pub const MAX_LOOKUPS: usize = 16;
/// Above this many elements the hash set of one prefix length is split into shards, each its
/// own kernel set: the kernel's dump of a hash set walks it from its start for every netlink
/// message (~2,000 elements), so listing one set costs its size squared, and a drift check of
/// a 900k-element set took 14.5 s of kernel time. Shards of at most this size list in about
/// linear time (docs/performance.md, "Sharded hash sets").
pub const SHARD_MAX: u64 = 65_536;
/// At most 2^this shards per hash set: each shard is one more rule per packet (a prefix
/// compare, then the lookup in the one shard that can hold the address).
pub const MAX_SHARD_BITS: u32 = 4;

/// The layout of both halves of a set: `[IPv4, IPv6]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetLayout {
    pub fams: [FamLayout; 2],
    /// Why the set must stay one lookup (an interval set) whatever its size, if it must.
    pub one_lookup: Option<&'static str>,
}

/// One family's half of a set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamLayout {
    /// 32 or 128.
    pub bits: u32,
    /// Sorted, merged (overlapping or adjacent joined) inclusive intervals.
    pub merged: Merged,
    /// Prefixes per length once the intervals are split into networks (index = length).
    pub counts: Vec<u64>,
    pub kind: LayoutKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutKind {
    /// One interval set `<name>_v4` (also when empty).
    Interval,
    /// Hash sets `<name>_v4_<len>`, one per target length (ascending, with its element
    /// count); `to[len]` is the target length the prefixes of `len` are expanded to;
    /// `shards[i]`: how the hash set of `targets[i]` is split, when it is.
    Hash { targets: Vec<(u32, u64)>, to: Vec<u32>, shards: Vec<Option<Shards>> },
}

/// How the hash set of one prefix length is split into kernel sets `<name>_v4_<len>_s<index>`:
/// by the address bits right after the leading bits all of the family's elements share, so an
/// address belongs to exactly one shard, found by a prefix compare, and an element's shard
/// depends only on the element (a change touches only its shard).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shards {
    /// Length of the prefix that picks a shard: the shared leading bits, then the shard bits.
    pub len: u32,
    /// The non-empty shards, ascending: (index, the prefix's network address, elements).
    pub parts: Vec<(u32, u128, u64)>,
}

impl SetLayout {
    /// The layout of a set with these elements; `one_lookup`: why it must stay an interval
    /// set whatever its size (a rule using it must stay one nft rule).
    pub fn of<'a>(elems: impl IntoIterator<Item = &'a AddrElem>, one_lookup: Option<&'static str>) -> SetLayout {
        SetLayout::of_merged(merged_compact(elems), one_lookup)
    }

    /// [`SetLayout::of`] from the elements' [`merged_compact`] intervals.
    pub fn of_merged([v4, v6]: [Merged; 2], one_lookup: Option<&'static str>) -> SetLayout {
        let big = one_lookup.is_none();
        SetLayout { fams: [FamLayout::of(32, v4, big), FamLayout::of(128, v6, big)], one_lookup }
    }

    /// The set's reason in the plan: what each family became, why, and the lookups per packet.
    pub fn describe(&self) -> String {
        let small = self.fams.iter().all(|f| f.kind == LayoutKind::Interval && f.prefixes() <= INTERVAL_MAX);
        let counts: Vec<String> =
            self.fams.iter().zip(["IPv4", "IPv6"]).filter(|(f, _)| !f.merged.is_empty()).map(|(f, n)| format!("{n} {}", prefixes(f.prefixes()))).collect();
        if counts.is_empty() {
            return "named nftables set (interval, one per address family): empty".into();
        }
        if small {
            return format!(
                "named nftables set (interval, one per address family): {}, 1 lookup per packet (hash sets only above {INTERVAL_MAX} prefixes)",
                counts.join(", ")
            );
        }
        let mut parts = Vec::new();
        for (f, name) in self.fams.iter().zip(["IPv4", "IPv6"]) {
            if f.merged.is_empty() {
                continue;
            }
            let total = f.prefixes();
            parts.push(match &f.kind {
                LayoutKind::Interval if total <= INTERVAL_MAX => format!("{name}: interval set, {}, 1 lookup per packet", prefixes(total)),
                LayoutKind::Interval => match self.one_lookup {
                    Some(why) => format!("{name}: interval set, {}, 1 lookup per packet (kept one set: {why})", prefixes(total)),
                    None => format!(
                        "{name}: interval set, {}, 1 lookup per packet (hash sets would need more than {MAX_LOOKUPS} masked lookups)",
                        prefixes(total)
                    ),
                },
                LayoutKind::Hash { targets, shards, .. } => {
                    let sets: Vec<String> = targets
                        .iter()
                        .zip(shards)
                        .map(|((l, n), sh)| match sh {
                            Some(sh) => format!("/{l} ({} in {} shards)", thousands(*n), sh.parts.len()),
                            None => format!("/{l} ({})", thousands(*n)),
                        })
                        .collect();
                    let expanded: u64 = targets.iter().map(|t| t.1).sum::<u64>() - total;
                    format!(
                        "{name}: hash sets {}, {} masked lookup{} per packet ({}{})",
                        sets.join(" "),
                        targets.len(),
                        if targets.len() == 1 { "" } else { "s" },
                        prefixes(total),
                        if expanded > 0 { format!("; {} elements added by prefix expansion", thousands(expanded)) } else { String::new() }
                    )
                }
            });
        }
        let hashed = self.fams.iter().any(|f| matches!(f.kind, LayoutKind::Hash { .. }));
        format!(
            "named nftables sets: {}{}",
            parts.join("; "),
            if hashed {
                format!(" — above {INTERVAL_MAX} prefixes an interval set would be read back by every `nft add element` on the host")
            } else {
                String::new()
            }
        )
    }
}

impl FamLayout {
    fn of(bits: u32, merged: Merged, may_split: bool) -> FamLayout {
        let mut counts = vec![0u64; bits as usize + 1];
        for (lo, hi) in merged.iter() {
            split(bits, lo, hi, |_, len| counts[len as usize] += 1);
        }
        let total: u64 = counts.iter().sum();
        let mut kind = if total <= INTERVAL_MAX || !may_split { LayoutKind::Interval } else { expand(bits, &counts, total) };
        if let LayoutKind::Hash { targets, to, shards } = &mut kind {
            *shards = targets.iter().map(|&(t, n)| (n > SHARD_MAX).then(|| shard(bits, &merged, to, t)).flatten()).collect();
        }
        FamLayout { bits, merged, counts, kind }
    }

    /// The shards of the hash set of target length `target` (None: one set).
    pub fn shards(&self, target: u32) -> Option<&Shards> {
        let LayoutKind::Hash { targets, shards, .. } = &self.kind else { return None };
        targets.iter().position(|t| t.0 == target).and_then(|i| shards[i].as_ref())
    }

    /// Prefixes once the intervals are split into networks.
    pub fn prefixes(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Lookups per packet (0 for an empty half: it is not matched at all).
    pub fn lookups(&self) -> usize {
        match &self.kind {
            _ if self.merged.is_empty() => 0,
            LayoutKind::Interval => 1,
            LayoutKind::Hash { targets, .. } => targets.len(),
        }
    }

    /// The mask of prefix length `len` as an address (`255.255.255.0` for /24).
    pub fn mask(&self, len: u32) -> IpAddr {
        addr(self.bits, mask(self.bits, len))
    }

    /// The network addresses of the hash set of target length `target`, ascending.
    pub fn try_for_each_element<E>(&self, target: u32, f: impl FnMut(IpAddr) -> Result<(), E>) -> Result<(), E> {
        self.try_for_each_element_in(target, None, f)
    }

    /// [`Self::try_for_each_element`], only those in network `within` (a shard's prefix:
    /// network address, length).
    pub fn try_for_each_element_in<E>(&self, target: u32, within: Option<(u128, u32)>, mut f: impl FnMut(IpAddr) -> Result<(), E>) -> Result<(), E> {
        let LayoutKind::Hash { to, .. } = &self.kind else { return Ok(()) };
        let (net_in, m) = match within {
            Some((net, len)) => (net, mask(self.bits, len)),
            None => (0, 0),
        };
        let last_in = net_in | (!m & mask(self.bits, self.bits));
        let mut out = Ok(());
        for (lo, hi) in self.merged.iter_overlapping(net_in, last_in) {
            split(self.bits, lo, hi, |net, len| {
                if out.is_err() || to[len as usize] != target {
                    return;
                }
                let step_bits = self.bits - target;
                for i in 0..1u128 << (target - len) {
                    let a = net | (i << step_bits);
                    if a & m != net_in {
                        continue;
                    }
                    if let Err(e) = f(addr(self.bits, a)) {
                        out = Err(e);
                        return;
                    }
                }
            });
            if out.is_err() {
                break;
            }
        }
        out
    }
}

/// Controlled prefix expansion: which lengths get their own hash set. Every present length is
/// expanded to the next chosen length at or above it; the cost of a choice is its elements
/// plus `weight` per lookup, where one lookup per packet is worth `max(INTERVAL_MAX, total/16)`
/// elements (at most ~6 % more memory per lookup saved). Dynamic programming over the present
/// lengths (at most 129).
fn expand(bits: u32, counts: &[u64], total: u64) -> LayoutKind {
    let present: Vec<u32> = (0..=bits).filter(|&l| counts[l as usize] > 0).collect();
    let weight = (INTERVAL_MAX.max(total / 16)) as f64;
    let n = present.len();
    // best[i]: cheapest cover of present[..i] whose last target is present[i - 1].
    let mut best = vec![(0f64, 0usize); n + 1];
    for i in 1..=n {
        let target = present[i - 1];
        let mut extra = 0f64;
        best[i] = (f64::INFINITY, 0);
        for j in (0..i).rev() {
            let l = present[j];
            extra += counts[l as usize] as f64 * 2f64.powi((target - l) as i32);
            let cost = best[j].0 + weight + extra;
            if cost < best[i].0 {
                best[i] = (cost, j);
            }
        }
    }
    let mut cuts = Vec::new();
    let mut i = n;
    while i > 0 {
        cuts.push(i);
        i = best[i].1;
    }
    cuts.reverse();
    if cuts.len() > MAX_LOOKUPS {
        return LayoutKind::Interval;
    }
    let mut to = vec![0u32; bits as usize + 1];
    let mut targets = Vec::new();
    let mut from = 0;
    for &i in &cuts {
        let target = present[i - 1];
        let mut elems = 0u64;
        for &l in &present[from..i] {
            to[l as usize] = target;
            elems += counts[l as usize] << (target - l);
        }
        targets.push((target, elems));
        from = i;
    }
    let shards = vec![None; targets.len()];
    LayoutKind::Hash { targets, to, shards }
}

/// How to split the hash set of target length `target` (of the family's `merged` intervals,
/// expanded as `to` says): the fewest shard bits (at most [`MAX_SHARD_BITS`]) after the leading
/// bits the whole family shares that leave no shard above [`SHARD_MAX`]. None when no bit is
/// left to split on.
fn shard(bits: u32, merged: &Merged, to: &[u32], target: u32) -> Option<Shards> {
    let (first, last) = (merged.iter().next()?.0, merged.iter().last()?.1);
    let shared = ((first ^ last) << (128 - bits)).leading_zeros().min(bits);
    let kmax = MAX_SHARD_BITS.min(target.saturating_sub(shared));
    if kmax == 0 {
        return None;
    }
    // Elements per shard at kmax bits, then folded for fewer bits.
    let plen = shared + kmax;
    let mut counts = vec![0u64; 1 << kmax];
    let index = |net: u128, plen: u32, k: u32| ((net >> (bits - plen)) & ((1u128 << k) - 1)) as usize;
    for (lo, hi) in merged.iter() {
        split(bits, lo, hi, |net, len| {
            if to[len as usize] != target {
                return;
            }
            if len >= plen {
                counts[index(net, plen, kmax)] += 1u64 << (target - len);
            } else {
                // The network spans 2^(plen - len) shards, each holding an equal part.
                let first = index(net, plen, kmax);
                for i in 0..1usize << (plen - len) {
                    counts[first + i] += 1u64 << (target - plen);
                }
            }
        });
    }
    let mut k = 1;
    let per = |k: u32| -> Vec<u64> { counts.chunks(1 << (kmax - k)).map(|c| c.iter().sum()).collect() };
    while k < kmax && per(k).iter().any(|&n| n > SHARD_MAX) {
        k += 1;
    }
    let len = shared + k;
    let base = first & mask(bits, shared);
    let parts = per(k).into_iter().enumerate().filter(|(_, n)| *n > 0).map(|(i, n)| (i as u32, base | ((i as u128) << (bits - len)), n)).collect();
    Some(Shards { len, parts })
}

/// The mask of a prefix of `len` bits in a `bits`-bit address.
pub fn mask(bits: u32, len: u32) -> u128 {
    let ones = if len == 0 { 0 } else { u128::MAX << (128 - len) };
    ones >> (128 - bits)
}

fn ones(k: u32) -> u128 {
    if k >= 128 {
        u128::MAX
    } else {
        (1u128 << k) - 1
    }
}

/// Split `lo..=hi` into the fewest networks, ascending: `f(network, prefix length)`.
pub fn split(bits: u32, lo: u128, hi: u128, mut f: impl FnMut(u128, u32)) {
    let mut lo = lo;
    loop {
        // The biggest aligned block at `lo` that fits: as many low bits as `lo` has clear, at
        // most floor(log2(span + 1)) (the widest 2^k - 1 within the span).
        let span = hi - lo;
        let fits = if span == u128::MAX { 128 } else { 127 - (span + 1).leading_zeros() };
        let k = if lo == 0 { bits } else { lo.trailing_zeros().min(bits) }.min(fits);
        f(lo, bits - k);
        if lo + ones(k) >= hi {
            return;
        }
        lo += ones(k) + 1;
    }
}

pub fn addr(bits: u32, v: u128) -> IpAddr {
    if bits == 32 {
        IpAddr::V4(Ipv4Addr::from(v as u32))
    } else {
        IpAddr::V6(Ipv6Addr::from(v))
    }
}

fn ip_u128(ip: &IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(*a)),
        IpAddr::V6(a) => u128::from(*a),
    }
}

/// An address element as an inclusive interval: (is IPv6, lo, hi).
pub fn interval(e: &AddrElem) -> (usize, u128, u128) {
    match e {
        AddrElem::Net(n) => (usize::from(n.addr().is_ipv6()), ip_u128(&n.network()), ip_u128(&n.broadcast())),
        AddrElem::Range(a, b) => {
            let (x, y) = (ip_u128(a), ip_u128(b));
            (usize::from(a.is_ipv6()), x.min(y), x.max(y))
        }
    }
}

/// Sorted, merged (overlapping or adjacent joined) intervals, `[IPv4, IPv6]`.
pub fn merged<'a>(elems: impl IntoIterator<Item = &'a AddrElem>) -> [Vec<(u128, u128)>; 2] {
    let [v4, v6] = merged_compact(elems);
    let v6 = match v6 {
        Merged::V6(v) => v,
        Merged::V4(_) => unreachable!("the second half is IPv6"),
    };
    [v4.to_vec(), v6]
}

/// [`merged`], compact (see [`Merged`]), each family merged in place.
pub fn merged_compact<'a>(elems: impl IntoIterator<Item = &'a AddrElem>) -> [Merged; 2] {
    let mut v4: Vec<u64> = Vec::new();
    let mut v6: Vec<(u128, u128)> = Vec::new();
    let elems = elems.into_iter();
    v4.reserve(elems.size_hint().0);
    for e in elems {
        match interval(e) {
            (0, lo, hi) => v4.push((lo as u64) << 32 | hi as u64),
            (_, lo, hi) => v6.push((lo, hi)),
        }
    }
    v4.sort_unstable();
    v6.sort_unstable();
    let mut w = 0;
    for r in 0..v4.len() {
        let (lo, hi) = (v4[r] >> 32, v4[r] & 0xffff_ffff);
        let (plo, phi) = if w > 0 { (v4[w - 1] >> 32, v4[w - 1] & 0xffff_ffff) } else { (0, 0) };
        if w > 0 && lo <= phi + 1 {
            v4[w - 1] = plo << 32 | phi.max(hi);
        } else {
            v4[w] = v4[r];
            w += 1;
        }
    }
    v4.truncate(w);
    v4.shrink_to_fit();
    let mut w = 0;
    for r in 0..v6.len() {
        let (lo, hi) = v6[r];
        if w > 0 && lo <= v6[w - 1].1.saturating_add(1) {
            v6[w - 1].1 = v6[w - 1].1.max(hi);
        } else {
            v6[w] = (lo, hi);
            w += 1;
        }
    }
    v6.truncate(w);
    v6.shrink_to_fit();
    [Merged::V4(v4), Merged::V6(v6)]
}

#[cfg(test)]
fn push_merged(out: &mut Vec<(u128, u128)>, sorted: impl Iterator<Item = (u128, u128)>) {
    for (lo, hi) in sorted {
        match out.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
}

fn prefixes(n: u64) -> String {
    format!("{} prefix{}", thousands(n), if n == 1 { "" } else { "es" })
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(bits: u32, lo: u128, hi: u128) -> Vec<(u128, u32)> {
        let mut v = Vec::new();
        split(bits, lo, hi, |a, l| v.push((a, l)));
        v
    }

    #[test]
    fn split_takes_the_biggest_block_that_fits_as_the_walk_down_did() {
        // The block size from the span's bit length, against shrinking the block one bit at a
        // time until it fits.
        fn walk(bits: u32, lo: u128, hi: u128) -> Vec<(u128, u32)> {
            let (mut lo, mut v) = (lo, Vec::new());
            loop {
                let mut k = if lo == 0 { bits } else { lo.trailing_zeros().min(bits) };
                while ones(k) > hi - lo {
                    k -= 1;
                }
                v.push((lo, bits - k));
                if lo + ones(k) >= hi {
                    return v;
                }
                lo += ones(k) + 1;
            }
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let (bits, a, w) = if i % 2 == 0 { (32, (x >> 32) as u128, (x & 0xffff) as u128 >> (i % 16)) } else { (128, (x as u128) << 64 | x.rotate_left(9) as u128, (x as u128) >> (i % 64)) };
            let max = ones(bits);
            let hi = a.saturating_add(w).min(max);
            assert_eq!(nets(bits, a, hi), walk(bits, a, hi), "{bits}: {a:#x}-{hi:#x}");
        }
        for (bits, lo, hi) in [(32, 0, 0), (32, 0, u32::MAX as u128), (128, 0, u128::MAX), (128, 1, u128::MAX), (128, 0, u128::MAX - 1), (32, 1, 4_294_967_294)] {
            assert_eq!(nets(bits, lo, hi), walk(bits, lo, hi), "{bits}: {lo:#x}-{hi:#x}");
        }
    }

    #[test]
    fn split_covers_exactly_with_the_fewest_networks() {
        assert_eq!(nets(32, 0, u32::MAX as u128), vec![(0, 0)]);
        assert_eq!(nets(128, 0, u128::MAX), vec![(0, 0)]);
        assert_eq!(nets(32, 5, 5), vec![(5, 32)]);
        // 10.0.0.1-10.0.0.6: .1/32 .2/31 .4/31 .6/32
        let b = 0x0a00_0000;
        assert_eq!(nets(32, b + 1, b + 6), vec![(b + 1, 32), (b + 2, 31), (b + 4, 31), (b + 6, 32)]);
        assert_eq!(nets(32, u32::MAX as u128, u32::MAX as u128), vec![(u32::MAX as u128, 32)]);
        assert_eq!(nets(128, u128::MAX - 1, u128::MAX), vec![(u128::MAX - 1, 127)]);
        // Every split is contiguous and exact, for many random intervals.
        let mut x = 0x1234_5678_9abc_def0u64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let (a, c) = ((x >> 32) as u128, (x & 0xffff_ffff) as u128);
            let (lo, hi) = (a.min(c), a.max(c));
            let mut next = lo;
            for (net, len) in nets(32, lo, hi) {
                assert_eq!(net, next);
                assert_eq!(net & !mask(32, len) & 0xffff_ffff, 0, "aligned");
                next = net + (1u128 << (32 - len));
            }
            assert_eq!(next, hi + 1);
        }
    }

    #[test]
    fn merged_sorts_and_joins_both_families() {
        let e = |s: &str| crate::read::units::parse_addr(s).unwrap();
        let elems = [e("10.0.0.4/30"), e("2001:db8::1"), e("10.0.0.0-10.0.0.3"), e("10.0.0.9"), e("2001:db8::/127"), e("255.255.255.255"), e("10.0.0.2"), e("0.0.0.0/0")];
        let [v4, v6] = merged(&elems[..7]);
        let b = 0x0a00_0000u128;
        assert_eq!(v4, vec![(b, b + 7), (b + 9, b + 9), (0xffff_ffff, 0xffff_ffff)]);
        let d = 0x2001_0db8u128 << 96;
        assert_eq!(v6, vec![(d, d + 1)]);
        assert_eq!(merged(&elems)[0], vec![(0, 0xffff_ffff)]);
        // The same as sorting the (lo, hi) pairs, for many random IPv4 intervals.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut all = Vec::new();
        for _ in 0..3000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = 20 + (x % 13) as u8;
            all.push(AddrElem::Net(ipnet::IpNet::V4(ipnet::Ipv4Net::new(Ipv4Addr::from((x >> 32) as u32 & 0x0fff_ffff), len).unwrap().trunc())));
        }
        let mut pairs: Vec<(u128, u128)> = all.iter().map(|e| (interval(e).1, interval(e).2)).collect();
        pairs.sort_unstable();
        let mut want: Vec<(u128, u128)> = Vec::new();
        push_merged(&mut want, pairs.into_iter());
        assert_eq!(merged(&all)[0], want);
    }

    #[test]
    fn masks() {
        assert_eq!(mask(32, 24), 0xffff_ff00);
        assert_eq!(mask(32, 0), 0);
        assert_eq!(mask(32, 32), 0xffff_ffff);
        assert_eq!(mask(128, 64), u128::MAX << 64);
        assert_eq!(mask(128, 128), u128::MAX);
    }

    fn layout_of(counts: &[(u32, u64)], bits: u32) -> LayoutKind {
        let mut c = vec![0u64; bits as usize + 1];
        for &(l, n) in counts {
            c[l as usize] = n;
        }
        let total = c.iter().sum();
        expand(bits, &c, total)
    }

    #[test]
    fn expansion_only_where_it_is_cheaper() {
        // The blocklist: 894k /32 and 99k /24 stay two lookups (a /24 is 256 /32s).
        let LayoutKind::Hash { targets, .. } = layout_of(&[(32, 894_000), (24, 99_000)], 32) else { panic!() };
        assert_eq!(targets, vec![(24, 99_000), (32, 894_000)]);
        // A handful of /31s and /30s next to 100k /32s: expanded into the /32 set.
        let LayoutKind::Hash { targets, to, .. } = layout_of(&[(32, 100_000), (31, 50), (30, 20)], 32) else { panic!() };
        assert_eq!(targets, vec![(32, 100_000 + 100 + 80)]);
        assert_eq!((to[30], to[31], to[32]), (32, 32, 32));
        // Many lengths, spread out: more than MAX_LOOKUPS after expansion: interval.
        let spread: Vec<(u32, u64)> = (16..=128).step_by(4).map(|l| (l, 100_000)).collect();
        assert_eq!(layout_of(&spread, 128), LayoutKind::Interval);
    }

    #[test]
    fn small_sets_stay_interval_sets() {
        let elems: Vec<AddrElem> = ["10.0.0.0/8", "192.0.2.7/32", "2001:db8::/32"].iter().map(|s| AddrElem::Net(s.parse().unwrap())).collect();
        let l = SetLayout::of(&elems, None);
        assert_eq!(l.fams[0].kind, LayoutKind::Interval);
        assert_eq!(l.fams[0].lookups(), 1);
        assert_eq!(l.describe(), "named nftables set (interval, one per address family): IPv4 2 prefixes, IPv6 1 prefix, 1 lookup per packet (hash sets only above 4096 prefixes)");
    }

    #[test]
    fn big_sets_become_hash_sets_per_length() {
        let mut elems: Vec<AddrElem> = (0..5000u32).map(|i| AddrElem::Net(ipnet::IpNet::from(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + 2 * i))))).collect();
        // (every other /24: adjacent ones would merge into shorter prefixes)
        elems.extend((0..100u32).map(|i| AddrElem::Net(format!("172.16.{}.0/24", 2 * i).parse().unwrap())));
        let l = SetLayout::of(&elems, None);
        assert_eq!(
            l.fams[0].kind,
            LayoutKind::Hash { targets: vec![(24, 100), (32, 5000)], to: { let mut t = vec![0; 33]; t[24] = 24; t[32] = 32; t }, shards: vec![None, None] }
        );
        let mut got = Vec::new();
        l.fams[0].try_for_each_element::<()>(24, |a| Ok(got.push(a))).unwrap();
        assert_eq!(got.len(), 100);
        assert_eq!(got[1], "172.16.2.0".parse::<IpAddr>().unwrap());
        assert_eq!(l.fams[0].mask(24), "255.255.255.0".parse::<IpAddr>().unwrap());
        assert!(l.describe().contains("hash sets /24 (100) /32 (5,000), 2 masked lookups per packet"), "{}", l.describe());
        assert_eq!(l.fams[1].lookups(), 0);
        let pinned = SetLayout::of(&elems, Some("a shape uses it"));
        assert_eq!(pinned.fams[0].kind, LayoutKind::Interval);
        assert!(pinned.describe().contains("kept one set: a shape uses it"), "{}", pinned.describe());
    }

    /// The elements of each shard, in order, and whether each lies in its shard's prefix.
    fn shard_elements(f: &FamLayout, target: u32) -> Vec<Vec<IpAddr>> {
        let sh = f.shards(target).expect("sharded");
        sh.parts
            .iter()
            .map(|&(_, net, _)| {
                let mut v = Vec::new();
                f.try_for_each_element_in::<()>(target, Some((net, sh.len)), |a| Ok(v.push(a))).unwrap();
                v
            })
            .collect()
    }

    #[test]
    fn a_hash_set_above_the_shard_size_is_split_by_address_bits_into_a_partition() {
        // 140k /32s spread over the IPv4 space and 300 /24s: the /32 set is sharded, the /24 not.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut elems: Vec<AddrElem> = (0..140_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                AddrElem::Net(ipnet::IpNet::from(IpAddr::V4(Ipv4Addr::from((x >> 16) as u32 | 1))))
            })
            .collect();
        elems.extend((0..300u32).map(|i| AddrElem::Net(format!("172.{}.{}.0/24", 16 + i / 128, 2 * (i % 128)).parse().unwrap())));
        let l = SetLayout::of(&elems, None);
        let f = &l.fams[0];
        let LayoutKind::Hash { targets, shards, .. } = &f.kind else { panic!("{:?}", f.kind) };
        assert_eq!(targets.iter().map(|t| t.0).collect::<Vec<_>>(), vec![24, 32]);
        assert!(shards[0].is_none(), "300 /24s stay one set");
        let sh = shards[1].as_ref().expect("the /32 set is sharded");
        assert_eq!(sh.len, 2, "two bits leave every shard at most SHARD_MAX of ~140k spread addresses");
        assert!(sh.parts.iter().all(|p| p.2 <= SHARD_MAX && p.2 > 0));
        let mut whole = Vec::new();
        f.try_for_each_element::<()>(32, |a| Ok(whole.push(a))).unwrap();
        let parts = shard_elements(f, 32);
        // Counted right, each shard's elements in its prefix, together the whole set in order.
        for (&(i, net, n), elems) in sh.parts.iter().zip(&parts) {
            assert_eq!(elems.len() as u64, n, "shard {i}");
            assert!(elems.iter().all(|a| matches!(a, IpAddr::V4(v) if u32::from(*v) as u128 >> 30 == net >> 30)), "shard {i}");
        }
        assert_eq!(parts.concat(), whole);
        assert!(l.describe().contains(&format!("/32 ({} in 4 shards)", thousands(targets[1].1))), "{}", l.describe());
    }

    #[test]
    fn shards_split_after_the_bits_every_element_shares() {
        // 70k /128s, 2001:db8:: with i in bits 64-80 (from the right): all share their first 47
        // bits, so the shard bit is the 48th.
        let elems: Vec<AddrElem> = (0..70_000u128).map(|i| AddrElem::Net(ipnet::IpNet::from(IpAddr::V6(Ipv6Addr::from((0x2001_0db8u128 << 96) | (i << 64) | 1))))).collect();
        let l = SetLayout::of(&elems, None);
        let sh = l.fams[1].shards(128).expect("sharded");
        assert_eq!(sh.len, 48);
        assert_eq!(sh.parts.iter().map(|p| (p.0, p.2)).collect::<Vec<_>>(), vec![(0, 65_536), (1, 4_464)]);
        assert_eq!(addr(128, sh.parts[1].1), "2001:db8:1::".parse::<IpAddr>().unwrap());
        assert_eq!(shard_elements(&l.fams[1], 128).concat().len(), 70_000);
        // Below the shard size: one set, as before.
        assert!(SetLayout::of(&elems[..60_000], None).fams[1].shards(128).is_none());
    }
}
