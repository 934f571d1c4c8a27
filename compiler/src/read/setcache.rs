//! Content-addressed cache of set files: what the compiler derives from one set file (its
//! elements with their positions, the merged intervals the layout starts from, the set's
//! manifest digest) stored by the file's content digest, so a file that did not change is not
//! parsed, sorted or hashed again.
//!
//! The compiler stays pure: it gets a [`SetFileStore`] beside the [`crate::read::source::SourceTree`]
//! (the runtime keeps one in its state dir) and only reads and writes byte strings through it.
//! An entry is trusted only when it decodes completely and its trailing SHA-256 matches: a
//! corrupt, truncated or foreign entry is reported to the store ([`SetFileStore::reject`]) and
//! the file is parsed as if there were no cache. The key covers the file's text, the entry
//! format and the compiler's version, so a new fwc never reads an old fwc's entries. Beside
//! each entry the store keeps the file's text ([`text_key`]) and, per path, which entry was
//! last used ([`last_key`]): a changed file is patched from that previous version
//! (`crate::read::setpatch`) instead of being parsed whole.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use sha2::{Digest, Sha256};

pub use crate::model::FileFacts;
use crate::place::merged::Merged;
use crate::model::AddrElem;

/// Set files shorter than this are parsed every time (a few thousand lines take well under a
/// millisecond: an entry would cost more than it saves).
pub const MIN_BYTES: usize = 64 * 1024;

/// Bumped whenever the entry layout or what it holds changes.
const FORMAT: &str = "fwc set-file cache 1";
const MAGIC: &[u8; 8] = b"FWCSET1\n";

/// Where entries live (the runtime: files under the state dir). Implementations must be safe
/// to share between processes: a reader sees a whole entry or none (write aside, rename).
pub trait SetFileStore: Send + Sync {
    /// The bytes stored under `key`, if any.
    fn get(&self, key: &str) -> Option<Vec<u8>>;
    /// Store `bytes` under `key` (best effort: a failure only costs the next compile time).
    fn put(&self, key: &str, bytes: &[u8]);
    /// The entry under `key` was unusable (`why`): warn, and drop it.
    fn reject(&self, key: &str, why: &str);
}

/// The store a compile uses, if any. Compares equal to any other: it changes how fast a tree
/// compiles, never what it compiles to.
#[derive(Clone, Default)]
pub struct SetCache(pub Option<Arc<dyn SetFileStore>>);

impl SetCache {
    pub fn new(store: Arc<dyn SetFileStore>) -> SetCache {
        SetCache(Some(store))
    }
}

impl std::fmt::Debug for SetCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "SetCache(on)" } else { "SetCache(off)" })
    }
}

impl PartialEq for SetCache {
    fn eq(&self, _: &SetCache) -> bool {
        true
    }
}
impl Eq for SetCache {}

/// One cache entry: the file's elements in file order with (byte offset, length) in the file,
/// and its [`FileFacts`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub elems: Vec<(AddrElem, u32, u32)>,
    pub facts: FileFacts,
}

/// The key of a set file's entry: hex SHA-256 of the format, the compiler's version and the text.
pub fn key(text: &str) -> String {
    let mut h = Sha256::new();
    h.update(FORMAT.as_bytes());
    h.update([0]);
    h.update(env!("CARGO_PKG_VERSION").as_bytes());
    h.update([0]);
    h.update(text.as_bytes());
    hex(&h.finalize())
}

/// The key the text of the set file whose entry is `key` is stored under (a changed file is
/// compared with it, `crate::read::setpatch`). It is believed only when `key` of it is `key`.
pub fn text_key(key: &str) -> String {
    format!("{key}-text")
}

/// The key of the pointer to the last entry written or read for the set file at `path` (its
/// contents: that entry's key): the previous version a changed file is patched from.
pub fn last_key(path: &str) -> String {
    let mut h = Sha256::new();
    h.update(FORMAT.as_bytes());
    h.update([0]);
    h.update(env!("CARGO_PKG_VERSION").as_bytes());
    h.update(b"\0last\0");
    h.update(path.as_bytes());
    format!("{}-last", hex(&h.finalize()))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The bytes of `entry` stored under `key` (the key is inside, so an entry copied to another
/// name is not believed).
pub fn encode(key: &str, entry: &Entry) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + entry.elems.len() * 14 + entry.facts.merged[0].len() * 8);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(&(entry.elems.len() as u64).to_le_bytes());
    for (e, off, len) in &entry.elems {
        match e {
            AddrElem::Net(n) => match n.addr() {
                IpAddr::V4(a) => {
                    out.push(0);
                    out.extend_from_slice(&a.octets());
                    out.push(n.prefix_len());
                }
                IpAddr::V6(a) => {
                    out.push(1);
                    out.extend_from_slice(&a.octets());
                    out.push(n.prefix_len());
                }
            },
            AddrElem::Range(IpAddr::V4(a), IpAddr::V4(b)) => {
                out.push(2);
                out.extend_from_slice(&a.octets());
                out.extend_from_slice(&b.octets());
            }
            AddrElem::Range(a, b) => {
                out.push(3);
                out.extend_from_slice(&v6_bytes(a));
                out.extend_from_slice(&v6_bytes(b));
            }
        }
        out.extend_from_slice(&off.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
    }
    let [Merged::V4(v4), Merged::V6(v6)] = &entry.facts.merged else { unreachable!("merged halves are [IPv4, IPv6]") };
    out.extend_from_slice(&(v4.len() as u64).to_le_bytes());
    for k in v4 {
        out.extend_from_slice(&k.to_le_bytes());
    }
    out.extend_from_slice(&(v6.len() as u64).to_le_bytes());
    for (lo, hi) in v6 {
        out.extend_from_slice(&lo.to_le_bytes());
        out.extend_from_slice(&hi.to_le_bytes());
    }
    out.extend_from_slice(&(entry.facts.digest.len() as u32).to_le_bytes());
    out.extend_from_slice(entry.facts.digest.as_bytes());
    let sum = Sha256::digest(&out);
    out.extend_from_slice(&sum);
    out
}

fn v6_bytes(a: &IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

/// Read an entry stored under `key`: `Err(why)` when it is not a whole, intact entry for that key.
pub fn decode(key: &str, bytes: &[u8]) -> Result<Entry, String> {
    let elems = std::cell::RefCell::new(Vec::new());
    let facts = decode_with(key, bytes, |n| elems.borrow_mut().reserve_exact(n), |e, off, len| elems.borrow_mut().push((e, off, len)))?;
    Ok(Entry { elems: elems.into_inner(), facts })
}

/// [`decode`] without holding the elements: `reserve(n)` is told their number, then `each`
/// gets them in file order (with offset and length), straight from the entry's bytes (a hit
/// of a million-line file puts them into the set without a copy of the million between).
/// Nothing is passed on before the checksum matched; an `Err` after some elements (an entry
/// whose checksum matches but which this format cannot read) means the caller drops them.
pub fn decode_with(key: &str, bytes: &[u8], reserve: impl FnOnce(usize), mut each: impl FnMut(AddrElem, u32, u32)) -> Result<FileFacts, String> {
    let Some(body_len) = bytes.len().checked_sub(32) else { return Err("truncated".into()) };
    let (body, sum) = bytes.split_at(body_len);
    if Sha256::digest(body).as_slice() != sum {
        return Err("its checksum does not match its contents".into());
    }
    let mut r = Reader { b: body, at: 0 };
    if r.take(8)? != MAGIC {
        return Err("not a set-file cache entry of this format".into());
    }
    let klen = r.u32()? as usize;
    if r.take(klen)? != key.as_bytes() {
        return Err("it was stored for another file".into());
    }
    let n = r.u64()? as usize;
    // Each record is at least 14 bytes: a count beyond the entry is corrupt, not an allocation.
    if n > body.len() / 14 {
        return Err("element count beyond the entry".into());
    }
    reserve(n);
    for _ in 0..n {
        let e = match r.u8()? {
            0 => net(IpAddr::V4(Ipv4Addr::from(r.arr::<4>()?)), r.u8()?)?,
            1 => net(IpAddr::V6(Ipv6Addr::from(r.arr::<16>()?)), r.u8()?)?,
            2 => AddrElem::Range(IpAddr::V4(Ipv4Addr::from(r.arr::<4>()?)), IpAddr::V4(Ipv4Addr::from(r.arr::<4>()?))),
            3 => AddrElem::Range(IpAddr::V6(Ipv6Addr::from(r.arr::<16>()?)), IpAddr::V6(Ipv6Addr::from(r.arr::<16>()?))),
            t => return Err(format!("unknown element tag {t}")),
        };
        each(e, r.u32()?, r.u32()?);
    }
    let n4 = r.u64()? as usize;
    if n4 > body.len() / 8 {
        return Err("interval count beyond the entry".into());
    }
    let v4 = (0..n4).map(|_| r.u64()).collect::<Result<Vec<u64>, String>>()?;
    let n6 = r.u64()? as usize;
    if n6 > body.len() / 32 {
        return Err("interval count beyond the entry".into());
    }
    let v6 = (0..n6).map(|_| Ok((u128::from_le_bytes(r.arr()?), u128::from_le_bytes(r.arr()?)))).collect::<Result<Vec<_>, String>>()?;
    let dlen = r.u32()? as usize;
    let digest = String::from_utf8(r.take(dlen)?.to_vec()).map_err(|_| "digest is not text".to_string())?;
    if r.at != body.len() {
        return Err("trailing bytes".into());
    }
    Ok(FileFacts { merged: [Merged::V4(v4), Merged::V6(v6)], digest })
}

fn net(a: IpAddr, len: u8) -> Result<AddrElem, String> {
    ipnet::IpNet::new(a, len).map(AddrElem::Net).map_err(|_| format!("bad prefix length {len}"))
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len()).ok_or("truncated")?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], String> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.arr::<1>()?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        let e = |s: &str| crate::read::units::parse_addr(s).unwrap();
        let elems: Vec<(AddrElem, u32, u32)> = ["192.0.2.7", "10.0.0.0/8", "2001:db8::/32", "10.0.0.1-10.0.0.9", "2001:db8::1-2001:db8::ff"]
            .iter()
            .enumerate()
            .map(|(i, t)| (e(t), i as u32 * 20, t.len() as u32))
            .collect();
        let merged = crate::place::setlayout::merged_compact(elems.iter().map(|x| &x.0));
        Entry { elems, facts: FileFacts { merged, digest: "abc".into() } }
    }

    #[test]
    fn entries_round_trip_and_damage_is_detected() {
        let k = key("192.0.2.7\n");
        let bytes = encode(&k, &entry());
        assert_eq!(decode(&k, &bytes), Ok(entry()));
        // Stored under another file's key: not believed.
        assert_eq!(decode(&key("other"), &bytes).unwrap_err(), "it was stored for another file");
        // Any flipped byte, and any truncation, is refused.
        for i in (0..bytes.len()).step_by(7) {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(decode(&k, &bad).is_err(), "byte {i}");
        }
        for n in [0, 10, bytes.len() - 1] {
            assert!(decode(&k, &bytes[..n]).is_err(), "{n} bytes");
        }
    }

    #[test]
    fn keys_depend_on_the_text_only() {
        assert_eq!(key("a\n"), key("a\n"));
        assert_ne!(key("a\n"), key("a\n\n"));
        assert_eq!(key("").len(), 64);
    }
}
