//! QoS class assignment, a planning decision: one token-bucket class per capped direction of
//! a kernel forward, and one per shape rule. Class ids are derived from the rule name, so
//! adding or removing a rule never renumbers the others (and never rewrites their live BPF map
//! entries).
//!
//! A class's `interfaces` are where the eBPF program must run (it charges on egress): a
//! forward's traffic can leave anywhere (empty = every non-loopback interface), an egress
//! shape's through its `dev`s, an ingress shape's — arriving on its `dev`s — anywhere else
//! (empty). Which packets are charged is decided by the nftables marks, not by this list.

use std::collections::BTreeSet;

use crate::artifacts::*;
use crate::model::*;

/// Default bucket depth: half a second of the rate, at least 64 KiB (a drop-only bucket with
/// less collapses TCP; measured on this kernel).
pub fn default_burst(rate_bytes_per_sec: u64) -> u64 {
    (rate_bytes_per_sec / 2).max(64 * 1024)
}

/// FNV-1a, 32 bit: a stable hash (Rust's `DefaultHasher` may change between releases).
fn fnv1a(s: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in s.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// Assign each capped rule a pair of class ids (`2k` = up, `2k+1` = down), so the nftables
/// side can derive the reply-direction mark by setting the lowest class bit.
pub fn assign_classes(kernel_forwards: &[&ForwardRule], shapes: &[&ShapeRule]) -> Vec<QosClass> {
    struct Want<'r> {
        kind: RuleKind,
        rule: &'r str,
        dirs: Vec<(QosDirection, u64)>,
        burst: Option<u64>,
        interfaces: Vec<String>,
    }
    let mut wants: Vec<Want> = Vec::new();
    for f in kernel_forwards {
        let mut dirs = Vec::new();
        if let Some(up) = &f.up {
            dirs.push((QosDirection::Up, up.value.0));
        }
        if let Some(down) = &f.down {
            dirs.push((QosDirection::Down, down.value.0));
        }
        if !dirs.is_empty() {
            wants.push(Want { kind: RuleKind::Forward, rule: &f.name.value, dirs, burst: f.burst.as_ref().map(|b| b.value), interfaces: vec![] });
        }
    }
    for s in shapes {
        // The program shapes on egress. An egress shape's traffic leaves through its `dev`s;
        // an ingress shape's traffic *arrives* on them and may leave through any other
        // interface, so it needs the program everywhere (empty = every non-loopback interface).
        // nftables only marks the packets that arrived on `dev`, so nothing else is charged.
        let mut interfaces: Vec<String> = match s.direction {
            Direction::Egress => s.devs.iter().map(|d| d.value.clone()).collect(),
            Direction::Ingress => Vec::new(),
        };
        interfaces.sort();
        interfaces.dedup();
        wants.push(Want {
            kind: RuleKind::Shape,
            rule: &s.name.value,
            dirs: vec![(QosDirection::Up, s.rate.value.0)],
            burst: s.burst.as_ref().map(|b| b.value),
            interfaces,
        });
    }
    // Deterministic order for collision probing: by kind, then name.
    wants.sort_by(|a, b| (a.kind, a.rule).cmp(&(b.kind, b.rule)));

    let pairs = QOS_MAX_CLASS_ID / 2; // pair k uses ids 2k and 2k+1, k in 1..pairs
    let mut used = BTreeSet::new();
    let mut classes = Vec::new();
    for w in wants {
        let mut k = 1 + fnv1a(&format!("{}/{}", w.kind.as_str(), w.rule)) % (pairs - 1);
        while !used.insert(k) {
            k = if k + 1 >= pairs { 1 } else { k + 1 };
        }
        for (dir, rate) in w.dirs {
            let id = 2 * k + u32::from(dir == QosDirection::Down);
            classes.push(QosClass {
                id,
                mark: id << QOS_MARK_SHIFT,
                kind: w.kind,
                rule: w.rule.to_string(),
                direction: dir,
                rate_bytes_per_sec: rate,
                burst_bytes: w.burst.unwrap_or_else(|| default_burst(rate)),
                interfaces: w.interfaces.clone(),
            });
        }
    }
    classes.sort_by_key(|c| c.id);
    classes
}
