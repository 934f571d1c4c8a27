//! Writes the commands of `nftables.json` straight into its text, in the file's form
//! ([`fwc_artifacts::nfttext`]: compact, a command per line, an element per line), without
//! building a `serde_json::Value` tree of the document. The text is either kept whole (the
//! document an apply holds) or passed on to a writer in blocks as it is written, hashed on the
//! way (`fwc compile --out`: the file is never held whole).

use std::io::Write;

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use sha2::{Digest, Sha256};

use fwc_artifacts::nfttext;

use super::fam::Fam;

/// Written text is passed on to a sink once this much of it is waiting.
const BLOCK: usize = 1 << 16;

/// The text of `{"nftables": [...]}`, its members written as they come.
pub(super) struct Document<'w> {
    text: Vec<u8>,
    members: usize,
    /// Where the text goes as it is written (`None`: it is kept whole in `text`).
    sink: Option<Sink<'w>>,
}

/// A writer the document's text is passed on to, and the hash of everything passed on.
struct Sink<'w> {
    w: &'w mut dyn Write,
    hash: Sha256,
    bytes: u64,
    /// The first write that failed: nothing is written after it, and finishing reports it.
    failed: Option<std::io::Error>,
}

/// The finished document when it was passed on to a writer: its sha256 (hex) and length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Streamed {
    pub sha256: String,
    pub bytes: u64,
}

/// Members kept apart from the document until they are appended to it (rules written before
/// the last object: a few housekeeping rules declared beside their chains).
#[derive(Default)]
pub(super) struct Members {
    text: Vec<u8>,
    members: usize,
}

impl Default for Document<'_> {
    fn default() -> Self {
        Document { text: nfttext::HEAD.to_vec(), members: 0, sink: None }
    }
}

impl<'w> Document<'w> {
    /// A document passed on to `w` in blocks as it is written.
    pub(super) fn streaming(w: &'w mut dyn Write) -> Document<'w> {
        let sink = Sink { w, hash: Sha256::new(), bytes: 0, failed: None };
        Document { sink: Some(sink), ..Document::default() }
    }
}

/// Pass `text` on to the sink when a block of it is waiting (or `all` of it).
fn spill(text: &mut Vec<u8>, sink: &mut Option<Sink<'_>>, all: bool) {
    let Some(sink) = sink else { return };
    if text.len() < BLOCK && !all {
        return;
    }
    if sink.failed.is_none() {
        sink.hash.update(&text[..]);
        sink.bytes += text.len() as u64;
        if let Err(e) = sink.w.write_all(text) {
            sink.failed = Some(e);
        }
    }
    text.clear();
}

/// Append `v` as a command after `before` others: compact JSON (written into a scratch buffer
/// reused per thread), its element lists one element per line.
fn push<T: Serialize + ?Sized>(text: &mut Vec<u8>, before: usize, v: &T) {
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    SCRATCH.with_borrow_mut(|one| {
        one.clear();
        serde_json::to_writer(&mut *one, v).expect("nftables JSON serializes");
        nfttext::push_member(text, before, one);
        if one.capacity() > 1 << 20 {
            *one = Vec::new(); // a big set's buffer is not kept for the rest of the run
        }
    });
}

impl Document<'_> {
    /// Append `v` as the next member.
    pub(super) fn push<T: Serialize + ?Sized>(&mut self, v: &T) {
        push(&mut self.text, self.members, v);
        self.members += 1;
        spill(&mut self.text, &mut self.sink, false);
    }

    /// Append members kept apart ([`Members`]) after this document's.
    pub(super) fn append(&mut self, rest: Members) {
        if rest.members == 0 {
            return;
        }
        // `rest` was written with a leading comma; the first member has none.
        let from = usize::from(self.members == 0);
        self.text.extend_from_slice(&rest.text[from..]);
        self.members += rest.members;
        spill(&mut self.text, &mut self.sink, false);
    }

    /// The finished text (trailing newline), kept whole. A bigger text's capacity is not
    /// doubled at the end: the last growth is exact.
    pub(super) fn finish(mut self) -> String {
        debug_assert!(self.sink.is_none(), "a streamed document is finished by finish_streamed");
        let tail = nfttext::tail(self.members);
        self.text.reserve_exact(tail.len());
        self.text.extend_from_slice(tail);
        self.text.shrink_to_fit();
        String::from_utf8(self.text).expect("serde_json writes UTF-8")
    }

    /// Finish a document passed on to a writer: the rest of its text written and flushed.
    pub(super) fn finish_streamed(mut self) -> std::io::Result<Streamed> {
        self.text.extend_from_slice(nfttext::tail(self.members));
        spill(&mut self.text, &mut self.sink, true);
        let sink = self.sink.expect("finish_streamed finishes a streamed document");
        if let Some(e) = sink.failed {
            return Err(e);
        }
        sink.w.flush()?;
        Ok(Streamed { sha256: hex::encode(sink.hash.finalize()), bytes: sink.bytes })
    }
}

impl Document<'_> {
    /// `push(&Add("set", body))` for a hash set, its elements written straight into the text:
    /// a million of them through serde's pretty formatter (an indent loop, an escape scan and
    /// several small copies per address) were a fifth of compiling a 1M-element set file.
    /// The same bytes (`hash_set_text_is_what_serde_writes`).
    pub(super) fn push_hash_set(&mut self, b: &HashSetBody) {
        let q = |s: &str| serde_json::to_string(s).expect("a string serializes");
        let (t, sink) = (&mut self.text, &mut self.sink);
        t.extend_from_slice(if self.members == 0 { b"\n" } else { b",\n" });
        self.members += 1;
        let kind = match b.fam {
            Fam::V4 => "ipv4_addr",
            Fam::V6 => "ipv6_addr",
        };
        t.extend_from_slice(format!("{{\"add\":{{\"set\":{{\"family\":\"inet\",\"table\":{},\"name\":{},\"type\":\"{kind}\",", q(b.table), q(&b.name)).as_bytes());
        let mut first = true;
        let _ = b.layout.try_for_each_element_in::<()>(b.len, b.within, |a| {
            t.extend_from_slice(if first { b"\n\"elem\": [\n  \"" } else { b",\n  \"" });
            crate::emit::addrtext::push_addr(t, a);
            t.push(b'"');
            first = false;
            spill(t, sink, false);
            Ok(())
        });
        t.extend_from_slice(if first { b"\"elem\":[]}}}" } else { b"\n]}}}" });
        spill(t, sink, false);
    }
}

impl Members {
    /// Append `v` (written with a leading comma: it follows the document's members).
    pub(super) fn push<T: Serialize + ?Sized>(&mut self, v: &T) {
        push(&mut self.text, 1, v);
        self.members += 1;
    }
}

/// `{"add": {kind: body}}`.
pub(super) struct Add<'a, T>(pub &'a str, pub T);

impl<T: Serialize> Serialize for Add<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Inner<'a, T>(&'a str, &'a T);
        impl<T: Serialize> Serialize for Inner<'_, T> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry(self.0, self.1)?;
                m.end()
            }
        }
        Inner("add", &Inner(self.0, &self.1)).serialize(s)
    }
}

/// The body of a named address set (`flags interval`), its merged intervals streamed as
/// elements: a million-element set is never held as JSON values.
pub(super) struct AddrSetBody<'a, I> {
    pub table: &'a str,
    pub name: String,
    pub fam: Fam,
    /// The merged intervals, ascending.
    pub elems: I,
}

/// `family`, `table`, `name` and `type` of a named address set.
fn addr_set_head<M: SerializeMap>(m: &mut M, table: &str, name: &str, fam: Fam) -> Result<(), M::Error> {
    m.serialize_entry("family", "inet")?;
    m.serialize_entry("table", table)?;
    m.serialize_entry("name", name)?;
    m.serialize_entry("type", match fam {
        Fam::V4 => "ipv4_addr",
        Fam::V6 => "ipv6_addr",
    })
}

impl<I: Iterator<Item = (u128, u128)> + Clone> Serialize for AddrSetBody<'_, I> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        addr_set_head(&mut m, self.table, &self.name, self.fam)?;
        m.serialize_entry("flags", &["interval"])?;
        if self.elems.clone().next().is_some() {
            m.serialize_entry("elem", &Intervals(self.fam, self.elems.clone()))?;
        }
        m.end()
    }
}

/// The body of one hash set of a big static set (`crate::place::setlayout`): the network addresses of
/// its prefix length, streamed.
pub(super) struct HashSetBody<'a> {
    pub table: &'a str,
    pub name: String,
    pub fam: Fam,
    pub layout: &'a crate::place::setlayout::FamLayout,
    pub len: u32,
    /// A shard's prefix (network address, length): only the elements in it.
    pub within: Option<(u128, u32)>,
}

/// The reference for [`Document::push_hash_set`] (the same text, through serde).
#[cfg(test)]
impl Serialize for HashSetBody<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Elements<'a>(&'a crate::place::setlayout::FamLayout, u32, Option<(u128, u32)>);
        impl Serialize for Elements<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut seq = s.serialize_seq(None)?;
                self.0.try_for_each_element_in(self.1, self.2, |a| seq.serialize_element(&crate::emit::addrtext::AddrStr(a)))?;
                seq.end()
            }
        }
        let mut m = s.serialize_map(None)?;
        addr_set_head(&mut m, self.table, &self.name, self.fam)?;
        m.serialize_entry("elem", &Elements(self.layout, self.len, self.within))?;
        m.end()
    }
}

struct Intervals<I>(Fam, I);

impl<I: Iterator<Item = (u128, u128)> + Clone> Serialize for Intervals<I> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        for (lo, hi) in self.1.clone() {
            seq.serialize_element(&Interval(self.0, lo, hi))?;
        }
        seq.end()
    }
}

/// One interval as an nft value: an address, `{"prefix": {"addr", "len"}}` or
/// `{"range": [lo, hi]}` (what `family::interval_expr` builds, written directly).
pub(super) struct Interval(pub Fam, pub u128, pub u128);

impl Serialize for Interval {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Prefix {
            addr: String,
            len: u32,
        }
        let Interval(fam, lo, hi) = *self;
        if lo == hi {
            return crate::emit::addrtext::AddrStr(fam.addr(lo)).serialize(s);
        }
        let mut m = s.serialize_map(Some(1))?;
        match fam.prefix_len(lo, hi) {
            Some(len) => m.serialize_entry("prefix", &Prefix { addr: fam.addr(lo).to_string(), len })?,
            None => m.serialize_entry("range", &[fam.addr(lo).to_string(), fam.addr(hi).to_string()])?,
        }
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::AddrElem;

    #[test]
    fn hash_set_text_is_what_serde_writes() {
        let mut elems: Vec<AddrElem> = (0..5000u32).map(|i| AddrElem::Net(ipnet::IpNet::from(std::net::IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + 2 * i))))).collect();
        elems.extend((0..100u32).map(|i| AddrElem::Net(format!("172.16.{}.0/24", 2 * i).parse().unwrap())));
        elems.extend((0..5000u32).map(|i| AddrElem::Net(format!("2001:db8:{:x}::1/128", 2 * i).parse().unwrap())));
        let layout = crate::place::setlayout::SetLayout::of(&elems, None);
        for (fam, f, lens) in [(Fam::V4, &layout.fams[0], vec![24, 32, 16]), (Fam::V6, &layout.fams[1], vec![128, 64])] {
            for len in lens {
                let within = Some((if fam == Fam::V4 { 0x0a00_0000 } else { 0x2001_0db8_u128 << 96 }, if fam == Fam::V4 { 20 } else { 36 }));
                let body = || HashSetBody { table: "fwc", name: format!("bl\"x_{len}"), fam, layout: f, len, within };
                let (mut fast, mut slow) = (Document::default(), Document::default());
                for _ in 0..2 {
                    fast.push_hash_set(&body());
                    slow.push(&Add("set", body()));
                }
                let (fast, slow) = (fast.finish(), slow.finish());
                assert_eq!(fast, slow, "{fam:?} /{len}");
            }
        }
    }
}
