//! One address family's merged intervals in a compact form (the layout of a set starts from
//! them; the set-file cache stores them). Pure data, no dependencies.

/// One family's merged intervals, compact: an IPv4 interval is one `u64` (`lo << 32 | hi`,
/// which sorts like the (lo, hi) pair), a quarter of a (u128, u128) pair: a million-element
/// set keeps 8 MB instead of 32 MB until its elements are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Merged {
    V4(Vec<u64>),
    V6(Vec<(u128, u128)>),
}

impl Merged {
    pub fn len(&self) -> usize {
        match self {
            Merged::V4(v) => v.len(),
            Merged::V6(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The intervals, ascending.
    pub fn iter(&self) -> impl Iterator<Item = (u128, u128)> + Clone + '_ {
        let (v4, v6) = match self {
            Merged::V4(v) => (Some(v.iter().map(|&k| unpack(k))), None),
            Merged::V6(v) => (None, Some(v.iter().copied())),
        };
        v4.into_iter().flatten().chain(v6.into_iter().flatten())
    }

    /// The intervals that reach into `[lo, hi]`, ascending: found by a binary search, not a
    /// walk from the first (a shard's elements out of a million).
    pub fn iter_overlapping(&self, lo: u128, hi: u128) -> impl Iterator<Item = (u128, u128)> + Clone + '_ {
        let (v4, v6) = match self {
            Merged::V4(v) => (Some(v[v.partition_point(|&k| unpack(k).1 < lo)..].iter().map(|&k| unpack(k))), None),
            Merged::V6(v) => (None, Some(v[v.partition_point(|&(_, h)| h < lo)..].iter().copied())),
        };
        v4.into_iter().flatten().chain(v6.into_iter().flatten()).take_while(move |&(l, _)| l <= hi)
    }

    pub fn to_vec(&self) -> Vec<(u128, u128)> {
        match self {
            Merged::V4(v) => v.iter().map(|&k| unpack(k)).collect(),
            Merged::V6(v) => v.clone(),
        }
    }
}

pub(crate) fn unpack(k: u64) -> (u128, u128) {
    ((k >> 32) as u128, (k & 0xffff_ffff) as u128)
}

