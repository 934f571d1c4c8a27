//! A changed set file read by patching its previous version's cache entry instead of parsing
//! it whole: the two texts are compared (common prefix and suffix, cut at line boundaries), the
//! elements of the unchanged lines are taken from the old entry (the suffix's offsets shifted),
//! only the lines in between are parsed, and the merged intervals the layout starts from are
//! patched where the change touches no neighbour (else merged again from the elements). The
//! result is exactly what a parse of the new text gives (`patched_files_read_like_parsed_ones`).
//! Pure.

use crate::model::AddrElem;
use crate::place::merged::Merged;
use crate::place::setlayout::{interval, merged_compact};
use crate::read::setcache::Entry;
use crate::read::setlines::{parse, LineError};

/// Up to this many elements removed (net of lines that came back) the intervals are patched;
/// more, and they are merged again from the elements (each removal scans the elements once).
const MAX_PATCHED_REMOVALS: usize = 64;

/// A patched reading of a set file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patched {
    /// The new file's elements in file order, with (offset, length) in the new text.
    pub elems: Vec<(AddrElem, u32, u32)>,
    /// Its merged intervals `[IPv4, IPv6]` (what `merged_compact` of `elems` gives).
    pub merged: [Merged; 2],
    /// Elements of the changed lines: (removed, added).
    pub changed: (usize, usize),
}

/// Read `new` as a patch of `old` (whose entry is `entry`). `Err`: the changed lines are bad
/// (the same errors a parse of the whole file reports, the rest being unchanged lines of a
/// file that parsed).
pub fn patch(old: &str, entry: &Entry, new: &str) -> Result<Patched, Vec<LineError>> {
    let (start, old_end, new_end) = changed_lines(old.as_bytes(), new.as_bytes());
    let shift = |off: u32| (off as i64 + new.len() as i64 - old.len() as i64) as u32;
    // The old elements are in file order: those of the prefix, of the changed lines, of the suffix.
    let first = entry.elems.partition_point(|x| (x.1 as usize) < start);
    let past = entry.elems.partition_point(|x| (x.1 as usize) < old_end);
    let mut added = Vec::new();
    let errors = parse(&new[start..new_end], |e, off, len| {
        added.push((e, (start + off) as u32, len as u32))
    });
    if !errors.is_empty() {
        return Err(errors
            .into_iter()
            .map(|e| LineError {
                offset: e.offset + start,
                ..e
            })
            .collect());
    }
    let removed: Vec<AddrElem> = entry.elems[first..past].iter().map(|x| x.0).collect();
    let added_elems: Vec<AddrElem> = added.iter().map(|x| x.0).collect();
    let changed = (removed.len(), added.len());
    let mut elems: Vec<(AddrElem, u32, u32)> =
        Vec::with_capacity(entry.elems.len() - removed.len() + added.len());
    elems.extend_from_slice(&entry.elems[..first]);
    elems.extend(added);
    elems.extend(
        entry.elems[past..]
            .iter()
            .map(|&(e, off, len)| (e, shift(off), len)),
    );
    let merged = patch_merged(&entry.facts.merged, removed, added_elems, &elems)
        .unwrap_or_else(|| merged_compact(elems.iter().map(|x| &x.0)));
    Ok(Patched {
        elems,
        merged,
        changed,
    })
}

/// (start, end in `old`, end in `new`) of the lines that differ: `old[..start] == new[..start]`
/// and `old[old_end..] == new[new_end..]`, all three at line starts.
fn changed_lines(old: &[u8], new: &[u8]) -> (usize, usize, usize) {
    let same = common_prefix(old, new);
    // Back to the start of the line the first difference is on.
    let start = new[..same]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let room = old.len().min(new.len()) - start;
    let mut tail = common_suffix(&old[old.len() - room..], &new[new.len() - room..]);
    // Forward to a line start (both texts agree on the bytes, so on where lines start).
    while tail > 0 {
        let at = new.len() - tail;
        if at == start || new[at - 1] == b'\n' {
            break;
        }
        tail = match new[at..].iter().position(|&b| b == b'\n') {
            Some(i) => tail - i - 1,
            None => 0,
        };
    }
    (start, old.len() - tail, new.len() - tail)
}

/// Bytes compared a block at a time (a slice comparison) before the one block that differs.
const BLOCK: usize = 4096;

/// Length of the common prefix of `a` and `b`.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut at = 0;
    while at + BLOCK <= n && a[at..at + BLOCK] == b[at..at + BLOCK] {
        at += BLOCK;
    }
    at + a[at..n]
        .iter()
        .zip(&b[at..n])
        .position(|(x, y)| x != y)
        .unwrap_or(n - at)
}

/// Length of the common suffix of `a` and `b` (of equal length).
fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len();
    let mut k = 0;
    while k + BLOCK <= n && a[n - k - BLOCK..n - k] == b[n - k - BLOCK..n - k] {
        k += BLOCK;
    }
    k + a[..n - k]
        .iter()
        .rev()
        .zip(b[..n - k].iter().rev())
        .position(|(x, y)| x != y)
        .unwrap_or(n - k)
}

/// `old` with the intervals of `removed` taken out and those of `added` joined in: None when a
/// removal is not simply an interval of its own (it overlapped or touched another element, or
/// there are too many), for the caller to merge again.
fn patch_merged(
    old: &[Merged; 2],
    mut removed: Vec<AddrElem>,
    mut added: Vec<AddrElem>,
    elems: &[(AddrElem, u32, u32)],
) -> Option<[Merged; 2]> {
    // Lines moved or rewritten to the same element change nothing.
    removed.sort_unstable();
    added.sort_unstable();
    let (mut i, mut j) = (0, 0);
    let (mut gone, mut new) = (Vec::new(), Vec::new());
    while i < removed.len() || j < added.len() {
        match (removed.get(i), added.get(j)) {
            (Some(r), Some(a)) if r == a => {
                i += 1;
                j += 1;
            }
            (Some(r), Some(a)) if r < a => {
                gone.push(*r);
                i += 1;
            }
            (Some(r), None) => {
                gone.push(*r);
                i += 1;
            }
            (_, Some(a)) => {
                new.push(*a);
                j += 1;
            }
            (None, None) => unreachable!(),
        }
    }
    if gone.len() > MAX_PATCHED_REMOVALS {
        return None;
    }
    let mut fams = [old[0].to_vec(), old[1].to_vec()];
    for e in &gone {
        let (f, lo, hi) = interval(e);
        // Its own interval, and no element left inside or beside it (a duplicate, a network
        // around it, an address next to it would all have been merged with it).
        let k = fams[f].binary_search(&(lo, hi)).ok()?;
        let touches = |x: &AddrElem| {
            let (g, a, b) = interval(x);
            g == f && a <= hi.saturating_add(1) && lo <= b.saturating_add(1)
        };
        if elems.iter().any(|x| touches(&x.0)) {
            return None;
        }
        fams[f].remove(k);
    }
    for e in &new {
        let (f, lo, hi) = interval(e);
        join(&mut fams[f], lo, hi);
    }
    let [v4, v6] = fams;
    Some([
        Merged::V4(
            v4.into_iter()
                .map(|(lo, hi)| (lo as u64) << 32 | hi as u64)
                .collect(),
        ),
        Merged::V6(v6),
    ])
}

/// Join `lo..=hi` into sorted, merged (overlapping or adjacent joined) intervals.
fn join(v: &mut Vec<(u128, u128)>, lo: u128, hi: u128) {
    // The first interval that reaches `lo` (or is adjacent to it) and the first past `hi`.
    let a = v.partition_point(|&(_, h)| h.saturating_add(1) < lo);
    let b = v.partition_point(|&(l, _)| l <= hi.saturating_add(1));
    if a >= b {
        v.insert(a, (lo, hi));
        return;
    }
    let joined = (v[a].0.min(lo), v[b - 1].1.max(hi));
    v.splice(a..b, [joined]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::setcache::FileFacts;

    fn read(text: &str) -> Entry {
        let mut elems = Vec::new();
        assert!(
            parse(text, |e, off, len| elems.push((e, off as u32, len as u32))).is_empty(),
            "{text}"
        );
        let merged = merged_compact(elems.iter().map(|x: &(AddrElem, u32, u32)| &x.0));
        Entry {
            elems,
            facts: FileFacts {
                merged,
                digest: String::new(),
            },
        }
    }

    fn check(old: &str, new: &str) {
        let got = patch(old, &read(old), new).unwrap_or_else(|e| panic!("{e:?}"));
        let want = read(new);
        assert_eq!(got.elems, want.elems, "{old:?} -> {new:?}");
        assert_eq!(got.merged, want.facts.merged, "{old:?} -> {new:?}");
    }

    /// A generated list and edits of it (what `state::set_cache`'s property runs end to end).
    fn lines(seed: u64, n: usize) -> Vec<String> {
        let mut x = seed | 1;
        (0..n)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let a = std::net::Ipv4Addr::from((x >> 20) as u32 & 0x0fff_ffff | 0x0a00_0000);
                match i % 13 {
                    0 => format!(
                        "{}.0/24",
                        a.octets()[..3]
                            .iter()
                            .map(u8::to_string)
                            .collect::<Vec<_>>()
                            .join(".")
                    ),
                    1 => format!("2001:db8:{:x}::{:x}", x >> 50, x & 0xffff),
                    2 => "# a comment".into(),
                    3 => format!("{a}  ; trailing"),
                    _ => a.to_string(),
                }
            })
            .collect()
    }

    #[test]
    fn patched_files_read_like_parsed_ones() {
        for seed in 1..40u64 {
            let base = lines(seed, 300);
            let text = |v: &[String]| v.join("\n") + "\n";
            let old = text(&base);
            let k = (seed as usize * 37) % base.len();
            let mut edits: Vec<Vec<String>> = Vec::new();
            let mut v = base.clone();
            v.insert(k, "198.51.100.7".into()); // add
            edits.push(v);
            let mut v = base.clone();
            v.remove(k); // remove
            edits.push(v);
            let mut v = base.clone();
            v[k] = "203.0.113.0/25".into(); // change
            edits.push(v);
            let mut v = base.clone();
            v.swap(k, (k + 5) % base.len()); // reorder
            edits.push(v);
            let mut v = base.clone();
            v.insert(k, base[(k + 9) % base.len()].clone()); // duplicate line
            edits.push(v);
            let mut v = base.clone();
            v.insert(k, "# new comment".into()); // comment
            v.push("10.0.0.1".into());
            edits.push(v);
            let mut v = base.clone();
            v.push(base[k].clone()); // neighbour of / equal to an existing element
            let mut a: u32 = base[k]
                .parse::<std::net::Ipv4Addr>()
                .map(u32::from)
                .unwrap_or(0x0a00_0001);
            a = a.wrapping_add(1);
            v.push(std::net::Ipv4Addr::from(a).to_string());
            edits.push(v);
            for e in &edits {
                check(&old, &text(e));
                check(&text(e), &old); // and back
            }
            check(&old, &old);
            check(&old, old.trim_end()); // last line without its newline
            check(&old, &format!("{old}192.0.2.1")); // appended without a newline
        }
    }

    #[test]
    fn bad_changed_lines_are_the_parse_errors_of_the_whole_file() {
        let old = "192.0.2.1\n192.0.2.2\n192.0.2.3\n";
        let new = "192.0.2.1\n192.0.2.300\n192.0.2.3\n";
        let errs = patch(old, &read(old), new).unwrap_err();
        let mut whole = Vec::new();
        assert_eq!(errs, parse(new, |e, _, _| whole.push(e)));
        assert_eq!(errs[0].offset, 10);
    }

    #[test]
    fn intervals_are_joined_like_a_merge() {
        let mut v = vec![(10, 12), (20, 25), (40, 40)];
        join(&mut v, 13, 14);
        assert_eq!(v, [(10, 14), (20, 25), (40, 40)]);
        join(&mut v, 16, 39);
        assert_eq!(v, [(10, 14), (16, 40)]);
        join(&mut v, 0, 0);
        join(&mut v, u128::MAX, u128::MAX);
        assert_eq!(v, [(0, 0), (10, 14), (16, 40), (u128::MAX, u128::MAX)]);
    }
}
