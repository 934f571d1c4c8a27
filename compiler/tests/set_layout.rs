//! Big static sets: a big static set compiles to hash sets per prefix length matched by masked
//! lookups; the evaluator (`fwc explain`/`fwc test`) must match exactly what the set says. The
//! set as written (addresses, networks of every length, ranges, overlaps; both families) is
//! the reference model; random and boundary addresses of every element are checked.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use fwc_compiler::eval::{Evaluator, Flow, Verdict};
use fwc_compiler::read::source::SourceTree;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn u128(&mut self) -> u128 {
        (u128::from(self.next()) << 64) | u128::from(self.next())
    }
}

/// One element as written: an inclusive interval of one family (`bits` 32 or 128).
struct Elem {
    bits: u32,
    lo: u128,
    hi: u128,
    text: String,
}

fn addr(bits: u32, v: u128) -> IpAddr {
    if bits == 32 {
        IpAddr::V4(Ipv4Addr::from(v as u32))
    } else {
        IpAddr::V6(Ipv6Addr::from(v))
    }
}

fn max(bits: u32) -> u128 {
    if bits == 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}

/// The elements: many single addresses, networks of every length from 8 (IPv4) / 16 (IPv6)
/// up, and ranges; written as text lines of a set file.
fn elements(r: &mut Rng) -> (Vec<Elem>, String) {
    let mut v = Vec::new();
    for (bits, shortest, singles) in [(32u32, 8u32, 5000), (128, 16, 5000)] {
        for _ in 0..singles {
            let a = r.u128() & max(bits);
            v.push(Elem { bits, lo: a, hi: a, text: addr(bits, a).to_string() });
        }
        for len in shortest..bits {
            for _ in 0..3 {
                let host = max(bits - len);
                let net = r.u128() & max(bits) & !host;
                v.push(Elem { bits, lo: net, hi: net | host, text: format!("{}/{len}", addr(bits, net)) });
            }
        }
        for _ in 0..50 {
            let a = r.u128() & max(bits);
            let span = r.u128() % (1u128 << 20);
            let hi = a.saturating_add(span).min(max(bits));
            v.push(Elem { bits, lo: a, hi, text: format!("{}-{}", addr(bits, a), addr(bits, hi)) });
        }
    }
    let mut text = String::from("# big-set layout reference set\n");
    for e in &v {
        text.push_str(&e.text);
        text.push('\n');
    }
    (v, text)
}

fn flow(saddr: IpAddr) -> Flow {
    let text = match saddr {
        IpAddr::V4(a) => format!("udp {a}:1000 -> 198.18.1.1:53"),
        IpAddr::V6(a) => format!("udp [{a}]:1000 -> [2001:db8::1]:53"),
    };
    Flow::parse(&text).unwrap()
}

#[test]
fn masked_lookups_match_exactly_what_the_set_says() {
    let mut r = Rng(0x2701_5e75);
    let (elems, text) = elements(&mut r);
    let tree = SourceTree::from_files([
        ("fwc.kdl".to_string(), "fwc 1\nset \"bl\" file=\"lists/bl.netset\"\ninput {\n    deny \"bl\" from=\"@bl\"\n}\n".to_string()),
        ("lists/bl.netset".to_string(), text),
    ]);
    let (art, _) = fwc_compiler::compile(&tree, None, None).unwrap_or_else(|d| panic!("{d:?}"));
    let nft = art.nftables.text();
    // The layout this test is about: hash sets, masked lookups, both families.
    assert!(nft.contains("\"bl_v4_32\"") && nft.contains("\"bl_v6_128\"") && !nft.contains("\"bl_v4\""), "not the hash layout");
    assert!(nft.contains("\"255.255.255.0\"") || nft.contains("\"255.255.0.0\""), "no masked lookup");
    let reason = &art.manifest.rules.iter().find(|r| r.name == "bl").unwrap().reason;
    assert!(reason.contains("IPv4: hash sets") && reason.contains("IPv6: hash sets") && reason.contains("masked lookups per packet"), "{reason}");

    let ev = Evaluator::new(&art).unwrap();
    let inside = |a: u128, bits: u32| elems.iter().any(|e| e.bits == bits && e.lo <= a && a <= e.hi);
    let mut probes: Vec<(u32, u128)> = Vec::new();
    for (i, e) in elems.iter().enumerate() {
        // every network and range; a sample of the single addresses
        if e.lo == e.hi && i % 10 != 0 {
            continue;
        }
        probes.extend([e.lo, e.hi, e.lo + (e.hi - e.lo) / 2, e.lo + r.u128() % (e.hi - e.lo).saturating_add(1).max(1)].map(|a| (e.bits, a)));
        if e.lo > 0 {
            probes.push((e.bits, e.lo - 1));
        }
        if e.hi < max(e.bits) {
            probes.push((e.bits, e.hi + 1));
        }
    }
    for bits in [32, 128] {
        probes.extend((0..2000).map(|_| (bits, r.u128() & max(bits))));
        probes.extend([(bits, 0), (bits, max(bits))]);
    }
    let (mut hits, mut misses, mut wrong) = (0, 0, Vec::new());
    for (bits, a) in probes {
        let want = inside(a, bits);
        let e = ev.explain(&flow(addr(bits, a))).unwrap();
        let got = e.decided_by.identity.as_deref() == Some("fwc:filter:bl");
        assert_eq!(got, e.verdict == Verdict::Drop);
        if want {
            hits += 1;
        } else {
            misses += 1;
        }
        if got != want {
            wrong.push(format!("{}: set says {want}, evaluator {got}", addr(bits, a)));
        }
    }
    eprintln!("{hits} addresses in the set, {misses} outside, {} disagree", wrong.len());
    assert!(hits > 1000 && misses > 1000, "probes not discriminating: {hits} in, {misses} out");
    assert!(wrong.is_empty(), "{} disagree, first: {:?}", wrong.len(), &wrong[..wrong.len().min(5)]);
}

/// A small set stays one interval set (one lookup), and says so in the plan's reason.
#[test]
fn small_sets_stay_interval_sets() {
    let tree = SourceTree::from_files([(
        "fwc.kdl".to_string(),
        "fwc 1\nset \"office\" \"203.0.113.0/24\" \"2001:db8:1::/48\"\ninput {\n    allow \"ssh\" proto=tcp port=22 from=\"@office\"\n}\n".to_string(),
    )]);
    let (art, _) = fwc_compiler::compile(&tree, None, None).unwrap();
    assert!(art.nftables.text().contains("\"office_v4\""));
    let reason = &art.manifest.rules.iter().find(|r| r.name == "office").unwrap().reason;
    assert_eq!(reason, "named nftables set (interval, one per address family): IPv4 1 prefix, IPv6 1 prefix, 1 lookup per packet (hash sets only above 4096 prefixes)");
}
