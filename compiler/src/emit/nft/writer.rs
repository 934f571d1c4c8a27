//! Writes the commands of `nftables.json` straight into its text, in the file's form
//! ([`fwc_artifacts::nfttext`]: compact, a command per line, an element per line), without
//! building a `serde_json::Value` tree of the document.

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

use fwc_artifacts::nfttext;

use super::fam::Fam;

/// The text of `{"nftables": [...]}`, its members written as they come.
pub(super) struct Document {
    text: Vec<u8>,
    members: usize,
}

/// Members kept apart from the document until they are appended to it (the rules, which
/// follow every object).
#[derive(Default)]
pub(super) struct Members {
    text: Vec<u8>,
    members: usize,
}

impl Default for Document {
    fn default() -> Document {
        Document { text: nfttext::HEAD.to_vec(), members: 0 }
    }
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

impl Document {
    /// Append `v` as the next member.
    pub(super) fn push<T: Serialize + ?Sized>(&mut self, v: &T) {
        push(&mut self.text, self.members, v);
        self.members += 1;
    }

    /// The finished text with `rest` appended (trailing newline).
    /// The bigger part is not copied into a second buffer: the rules are appended to the
    /// objects, or (usually, the rules being most of the text) the objects are moved in front
    /// of the rules inside the rules' buffer; a million-element set is all objects.
    pub(super) fn finish(self, rest: Members) -> String {
        let empty = self.members == 0 && rest.members == 0;
        let tail = nfttext::tail(if empty { 0 } else { 1 });
        let mut rules = rest.text;
        if self.members == 0 && rest.members > 0 {
            rules.remove(0); // the rules' leading comma (the newline stays)
        }
        let head = self.text;
        let text = if head.len() >= rules.len() {
            let mut text = head;
            text.reserve_exact(rules.len() + tail.len());
            text.extend_from_slice(&rules);
            drop(rules);
            text.extend_from_slice(tail);
            text
        } else {
            let mut text = rules;
            // Exact: the text's final size, not a doubled capacity.
            text.reserve_exact(head.len() + tail.len());
            let n = text.len();
            text.resize(n + head.len(), 0);
            text.copy_within(0..n, head.len());
            text[..head.len()].copy_from_slice(&head);
            drop(head);
            text.extend_from_slice(tail);
            text
        };
        String::from_utf8(text).expect("serde_json writes UTF-8")
    }
}

impl Document {
    /// `push(&Add("set", body))` for a hash set, its elements written straight into the text:
    /// a million of them through serde's pretty formatter (an indent loop, an escape scan and
    /// several small copies per address) were a fifth of compiling a 1M-element set file.
    /// The same bytes (`hash_set_text_is_what_serde_writes`).
    pub(super) fn push_hash_set(&mut self, b: &HashSetBody) {
        let q = |s: &str| serde_json::to_string(s).expect("a string serializes");
        let t = &mut self.text;
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
            Ok(())
        });
        t.extend_from_slice(if first { b"\"elem\":[]}}}" } else { b"\n]}}}" });
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
                let (fast, slow) = (fast.finish(Members::default()), slow.finish(Members::default()));
                assert_eq!(fast, slow, "{fam:?} /{len}");
            }
        }
    }
}
