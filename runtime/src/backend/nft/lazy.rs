//! `nftables.json` with its element lists left as text: the document's skeleton
//! (every object, without the `elem` arrays of its sets and maps) parsed, each set's `elem`
//! array kept as a byte range of the file. Two generations then differ by a comparison of
//! bytes and the parse of the few elements around the change, not a parse of every element.
//! Pure; anything that is not the pretty JSON the compiler writes is `None` (the caller parses
//! the whole document instead, as before).

use std::borrow::Cow;
use std::ops::Range;

use fwc_compiler::artifacts::NftDoc;
use memchr::memmem;
use serde_json::Value;

/// One set's or map's `elem` array, as text.
#[derive(Debug, Clone)]
pub struct RawElems {
    /// "set" or "map".
    pub kind: String,
    pub name: String,
    /// Index of its command in the `nftables` array.
    pub item: usize,
    /// Whether the command is `{"add": {KIND: …}}` (else a bare `{KIND: …}`).
    pub wrapped: bool,
    /// `[` … `]` of the array in the text.
    pub range: Range<usize>,
    /// Indentation of the array's elements (pretty JSON: the key's plus two).
    pub indent: usize,
}

/// A document split into skeleton and element texts (ranges of the document's text).
#[derive(Debug, Clone)]
pub struct Split {
    /// The document without the `elem` key of the sets and maps in `raw`.
    pub skeleton: Value,
    pub raw: Vec<RawElems>,
}

/// The body of the set or map `r` in a skeleton (or a copy of it).
pub fn body_mut<'v>(doc: &'v mut Value, r: &RawElems) -> Option<&'v mut serde_json::Map<String, Value>> {
    let item = doc.get_mut("nftables")?.as_array_mut()?.get_mut(r.item)?;
    let item = if r.wrapped { item.get_mut("add")? } else { item };
    item.get_mut(r.kind.as_str())?.as_object_mut()
}

/// Split pretty `text` (serde_json's pretty printer, two-space indent, as the compiler and the
/// state dir write `nftables.json`). None: not in that form (or no element array at all).
pub fn split(text: &str) -> Option<Split> {
    const KEY: &[u8] = b"\"elem\": [\n";
    let bytes = text.as_bytes();
    let mut ranges: Vec<(Range<usize>, usize)> = Vec::new();
    let mut at = 0;
    let finder = memmem::Finder::new(KEY);
    while let Some(off) = finder.find(&bytes[at..]) {
        let pos = at + off;
        // The key starts its line: only spaces before it since the last newline.
        let ls = memchr::memrchr(b'\n', &bytes[..pos]).map_or(0, |i| i + 1);
        if !bytes[ls..pos].iter().all(|&b| b == b' ') {
            return None;
        }
        let key_indent = pos - ls;
        let open = pos + KEY.len() - 2; // the '['
        let mut close_pat = Vec::with_capacity(key_indent + 2);
        close_pat.push(b'\n');
        close_pat.resize(key_indent + 1, b' ');
        close_pat.push(b']');
        let close = open + memmem::find(&bytes[open..], &close_pat)? + close_pat.len(); // past ']'
        ranges.push((open..close, key_indent + 2));
        at = close;
    }
    if ranges.is_empty() {
        return None;
    }
    // The skeleton: each array replaced by its index (no element list is a number).
    let mut skel = String::with_capacity(text.len().min(1 << 20));
    let mut last = 0;
    for (k, (r, _)) in ranges.iter().enumerate() {
        skel.push_str(&text[last..r.start]);
        skel.push_str(&k.to_string());
        last = r.end;
    }
    skel.push_str(&text[last..]);
    let mut skeleton: Value = serde_json::from_str(&skel).ok()?;
    let mut raw: Vec<Option<RawElems>> = vec![None; ranges.len()];
    for (i, item) in skeleton.get_mut("nftables")?.as_array_mut()?.iter_mut().enumerate() {
        let Some(m) = item.as_object_mut() else { continue };
        let wrapped = m.len() == 1 && m.get("add").is_some_and(Value::is_object);
        let m = if wrapped { m.get_mut("add").and_then(Value::as_object_mut)? } else { m };
        for kind in ["set", "map"] {
            let Some(body) = m.get_mut(kind).and_then(Value::as_object_mut) else { continue };
            let Some(k) = body.get("elem").and_then(Value::as_u64) else { continue };
            let name = body.get("name")?.as_str()?.to_string();
            let (range, indent) = ranges.get(k as usize)?.clone();
            if raw[k as usize].is_some() {
                return None;
            }
            raw[k as usize] = Some(RawElems { kind: kind.into(), name, item: i, wrapped, range, indent });
            *body = std::mem::take(body).into_iter().filter(|(key, _)| key != "elem").collect();
        }
    }
    // Every array must have been a set's or map's element list.
    let raw: Option<Vec<RawElems>> = raw.into_iter().collect();
    Some(Split { skeleton, raw: raw? })
}

/// Splits of recently seen documents, by sha256 of their text: one apply looks at the same
/// two documents in the plan, prepare, verify and record.
static SPLITS: std::sync::Mutex<Vec<(String, std::sync::Arc<Split>)>> = std::sync::Mutex::new(Vec::new());

/// The document's text and its [`split`] (computed once per content).
pub fn split_doc(doc: &NftDoc) -> Option<(&str, std::sync::Arc<Split>)> {
    let text = doc.raw_text()?;
    let key = doc.sha256();
    if let Some(s) = SPLITS.lock().ok()?.iter().find(|(k, _)| k == key).map(|(_, s)| s.clone()) {
        return Some((text, s));
    }
    let s = std::sync::Arc::new(split(text)?);
    if let Ok(mut memo) = SPLITS.lock() {
        memo.insert(0, (key.to_string(), s.clone()));
        memo.truncate(4);
    }
    Some((text, s))
}

/// The document without the element lists of its sets and maps where that is cheap (text
/// present and in the compiler's form), else the whole document. What structure-only readers
/// (the diff's declarations, verify, dynamic sets) need.
pub fn skeleton(doc: &NftDoc) -> Cow<'_, Value> {
    match split_doc(doc) {
        Some((_, s)) => Cow::Owned(s.skeleton.clone()),
        None => Cow::Borrowed(doc.value()),
    }
}

/// Parse the elements of an array text (`[` first), or a run of its element lines (`  a,\n
/// b,\n` …, indented). A run of one map entry is itself an array (`  [\n key,\n value\n  ]`):
/// only the text of a whole array has its brackets taken off, else a map entry's key and value
/// would be read as two elements.
pub fn parse_elements(lines: &str) -> Option<Vec<Value>> {
    let t = match lines.strip_prefix('[') {
        Some(inner) => inner.trim_end().strip_suffix(']')?.trim(),
        None => lines.trim(),
    };
    let t = t.strip_suffix(',').unwrap_or(t);
    if t.is_empty() {
        return Some(Vec::new());
    }
    serde_json::from_str(&format!("[{t}]")).ok()
}

/// Whether an element line starts at `ls` (after a newline): `indent` spaces, then the first
/// character of a value (not a closing bracket).
fn element_starts(t: &[u8], ls: usize, indent: usize) -> bool {
    t.len() > ls + indent
        && t[ls..ls + indent].iter().all(|&b| b == b' ')
        && !matches!(t[ls + indent], b' ' | b']' | b'}' | b'\n')
}

/// Length of the common prefix of two byte strings (compared in blocks).
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    const B: usize = 4096;
    while i + B <= n && a[i..i + B] == b[i..i + B] {
        i += B;
    }
    i + a[i..n].iter().zip(&b[i..n]).take_while(|(x, y)| x == y).count()
}

fn common_suffix(a: &[u8], b: &[u8], limit: usize) -> usize {
    let n = a.len().min(b.len()).min(limit);
    let mut i = 0;
    const B: usize = 4096;
    while i + B <= n && a[a.len() - i - B..a.len() - i] == b[b.len() - i - B..b.len() - i] {
        i += B;
    }
    while i < n && a[a.len() - 1 - i] == b[b.len() - 1 - i] {
        i += 1;
    }
    i
}

/// The elements of two pretty `elem` arrays outside their common head and tail (whole
/// elements, compared as text): what the diff has to look at. None: not in the expected form.
pub fn middles(a: &str, b: &str, indent: usize) -> Option<(Vec<Value>, Vec<Value>)> {
    if a == b {
        return Some((Vec::new(), Vec::new()));
    }
    let (ab, bb) = (a.as_bytes(), b.as_bytes());
    let p = common_prefix(ab, bb);
    // Back to the start of an element line in both (at most the first element, after "[\n").
    let mut start = p;
    loop {
        let ls = memchr::memrchr(b'\n', &ab[..start.min(ab.len())]).map_or(0, |i| i + 1);
        if ls <= 2 {
            start = 2;
            break;
        }
        if element_starts(ab, ls, indent) && element_starts(bb, ls, indent) {
            start = ls;
            break;
        }
        start = ls - 1;
    }
    let s = common_suffix(ab, bb, ab.len().min(bb.len()) - start);
    // Forward to the start of an element line, or the closing line, in the common tail.
    let (mut ea, mut eb) = (ab.len() - s, bb.len() - s);
    loop {
        if ab[ea - 1] == b'\n' && bb[eb - 1] == b'\n' {
            let closing = |t: &[u8], at: usize| t.len() == at + indent - 1 && t[at..at + indent - 2].iter().all(|&c| c == b' ');
            if (element_starts(ab, ea, indent) && element_starts(bb, eb, indent)) || (closing(ab, ea) && closing(bb, eb)) {
                break;
            }
        }
        let next = memchr::memchr(b'\n', &ab[ea..])? + 1;
        ea += next;
        eb += next;
        if ea > ab.len() || eb > bb.len() {
            return None;
        }
    }
    if start > ea || start > eb {
        return None;
    }
    Some((parse_elements(&a[start..ea])?, parse_elements(&b[start..eb])?))
}

/// `base` and `next` with the element lists they share by name reduced to the elements around
/// their differences (the common head and tail of each list left out: they are unchanged), and
/// every other element list complete. What the element diff (runtime and plan) gives for the
/// pair is the same as for the whole documents, since both skip the common head and tail and
/// then compare by element. `whole(kind, name)`: keep that set's lists complete (a set the
/// live table lacks is created with every element). None: either text is missing or not in
/// the compiler's form.
pub fn reduced_pair(base: &NftDoc, next: &NftDoc, whole: impl Fn(&str, &str) -> bool) -> Option<(Value, Value)> {
    let ((tb, sb), (tn, sn)) = (split_doc(base)?, split_doc(next)?);
    let (mut b, mut n) = (sb.skeleton.clone(), sn.skeleton.clone());
    for rn in &sn.raw {
        let rb = sb.raw.iter().find(|r| r.kind == rn.kind && r.name == rn.name);
        let (eb, en) = match rb {
            Some(rb) if rb.indent == rn.indent && !whole(&rn.kind, &rn.name) => middles(&tb[rb.range.clone()], &tn[rn.range.clone()], rn.indent)?,
            Some(rb) => (parse_elements(&tb[rb.range.clone()])?, parse_elements(&tn[rn.range.clone()])?),
            None => (Vec::new(), parse_elements(&tn[rn.range.clone()])?),
        };
        body_mut(&mut n, rn)?.insert("elem".into(), Value::Array(en));
        if let Some(rb) = rb {
            body_mut(&mut b, rb)?.insert("elem".into(), Value::Array(eb));
        }
    }
    for rb in sb.raw.iter().filter(|r| !sn.raw.iter().any(|x| x.kind == r.kind && x.name == r.name)) {
        let all = parse_elements(&tb[rb.range.clone()])?;
        body_mut(&mut b, rb)?.insert("elem".into(), Value::Array(all));
    }
    Some((b, n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fwc_compiler::artifacts::to_pretty;
    use serde_json::json;

    fn doc(sets: &[(&str, Vec<Value>)]) -> Value {
        let mut items = vec![json!({"metainfo": {"json_schema_version": 1}}), json!({"add": {"table": {"family": "inet", "name": "fwc"}}})];
        for (name, elems) in sets {
            items.push(json!({"add": {"set": {"family": "inet", "table": "fwc", "name": name, "type": "ipv4_addr", "elem": elems}}}));
        }
        items.push(json!({"add": {"map": {"family": "inet", "table": "fwc", "name": "m", "type": "inet_service", "map": "ipv4_addr",
            "elem": [[80, "198.18.0.1"], [443, {"elem": {"val": "198.18.0.2", "comment": "x"}}]]}}}));
        items.push(json!({"add": {"rule": {"family": "inet", "table": "fwc", "chain": "input", "comment": "\"elem\": [\n",
            "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}}, "right": {"set": ["1.1.1.1", "2.2.2.2"]}}}]}}}));
        json!({"nftables": items})
    }

    fn addrs(r: std::ops::Range<u32>) -> Vec<Value> {
        r.map(|i| json!(format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255))).collect()
    }

    /// The skeleton is the document without the element lists; every list is found.
    #[test]
    fn split_finds_every_element_list() {
        let v = doc(&[("a", addrs(0..50)), ("b", addrs(7..9))]);
        let text = to_pretty(&v);
        let s = split(&text).expect("pretty text splits");
        assert_eq!(s.raw.iter().map(|r| (r.kind.as_str(), r.name.as_str())).collect::<Vec<_>>(), [("set", "a"), ("set", "b"), ("map", "m")]);
        assert_eq!(crate::backend::nft::structure(&v), crate::backend::nft::structure(&s.skeleton));
        for r in &s.raw {
            let want = v["nftables"][r.item]["add"][r.kind.as_str()]["elem"].clone();
            assert_eq!(Value::Array(parse_elements(&text[r.range.clone()]).unwrap()), want);
        }
        // Not pretty: no split (the caller parses the whole document).
        assert!(split(&serde_json::to_string(&v).unwrap()).is_none());
    }

    /// The element diff of the reduced pair equals that of the whole documents, for additions,
    /// removals, replacements at the head, the tail and the middle, and new and gone sets.
    #[test]
    fn reduced_pairs_diff_like_the_whole_documents() {
        let base = doc(&[("a", addrs(0..3000)), ("b", addrs(5..9)), ("gone", addrs(0..3))]);
        let mut cases = Vec::new();
        for (lo, hi, extra) in [(0, 3000, None), (1, 3000, None), (0, 2999, None), (0, 3000, Some(5000)), (0, 3000, Some(1500))] {
            let mut a: Vec<Value> = addrs(lo..hi);
            if let Some(x) = extra {
                a.insert(x % 3000, json!(format!("11.0.0.{}", x % 256)));
            }
            let mut middle = a.clone();
            if lo == 0 && hi == 3000 && extra.is_none() {
                middle.remove(1700);
                middle.insert(1700, json!("12.0.0.1"));
            }
            cases.push(doc(&[("a", middle), ("b", addrs(5..9)), ("new", addrs(0..4))]));
        }
        let bd = NftDoc::from_pretty_text(to_pretty(&base));
        // The live table as nft lists it: bare objects (here: the base's, without elements),
        // once with every set and once without set "a" (deleted behind fwc's back).
        let listing_of = |doc: &Value, skip: Option<&str>| {
            let items: Vec<Value> = crate::backend::nft::structure(doc)["nftables"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.get("add").cloned().unwrap_or_else(|| c.clone()))
                .filter(|c| skip.is_none_or(|s| c.get("set").is_none_or(|b| b["name"] != s)))
                .collect();
            json!({"nftables": items})
        };
        for next in cases {
            let nd = NftDoc::from_pretty_text(to_pretty(&next));
            for skip in [None, Some("a")] {
                let live = listing_of(&base, skip);
                let (rb, rn) = reduced_pair(&bd, &nd, |_, n| skip == Some(n)).expect("reduces");
                if skip.is_none() {
                    let (x, y) = (rb["nftables"][2]["add"]["set"]["elem"].as_array().unwrap().len(), rn["nftables"][2]["add"]["set"]["elem"].as_array().unwrap().len());
                    assert!(x < 100 && y < 100, "the head and tail are left out: {x} {y}");
                }
                let canon = listing_of(&next, None);
                let whole = super::super::diff::diff(&base, &next, &canon, &live).unwrap();
                let reduced = super::super::diff::diff(&rb, &rn, &canon, &live).unwrap();
                assert_eq!(whole, reduced);
                assert!(whole.0.mode != super::super::diff::NftMode::Unchanged || next == base);
            }
        }
    }

    /// A changed map entry is read back whole (`[key, value]`): a run of one entry is itself
    /// an array, and its brackets were taken off, so the diff deleted `key` and `value` as two
    /// keys ("invalid data type, expected concatenation of …") and added keys without values
    /// ("Invalid argument"): every edit of a forward fell back to a whole-table replace.
    #[test]
    fn a_changed_map_entry_is_read_whole() {
        let map = |port: u16, to: &str| {
            json!({"nftables": [{"add": {"map": {"family": "inet", "table": "fwc", "name": "fwd4_addr",
                "type": ["inet_proto", "inet_service"], "map": "ipv4_addr",
                "elem": [[{"elem": {"val": {"concat": ["tcp", port]}, "comment": "fwc:forward:web"}}, to]]}}}]})
        };
        let (base, next) = (map(8080, "198.19.0.2"), map(8081, "198.19.0.3"));
        let (b, n) = reduced_pair(&NftDoc::from_pretty_text(to_pretty(&base)), &NftDoc::from_pretty_text(to_pretty(&next)), |_, _| false).unwrap();
        assert_eq!(b["nftables"][0]["add"]["map"]["elem"], base["nftables"][0]["add"]["map"]["elem"]);
        assert_eq!(n["nftables"][0]["add"]["map"]["elem"], next["nftables"][0]["add"]["map"]["elem"]);
    }

}
