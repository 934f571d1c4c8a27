//! A big `nftables.json` of a generation stored in pieces: the text outside the
//! element lists inline, each element list cut into chunks at element lines chosen by their
//! content (adding or removing one element changes the one chunk around it), each chunk a
//! content-addressed file `D/blobs/<sha256>` shared by every generation that has it. So a
//! one-element change writes one chunk, not the million elements again. The generation's
//! `nftables.json` is reassembled byte for byte and checked against the digest its
//! `applied.json` records, exactly like a file stored whole.

use std::path::Path;

use fwc_compiler::artifacts::sha256_hex;
use miette::{miette, IntoDiagnostic, Result, WrapErr};
use serde::{Deserialize, Serialize};

use crate::backend::nft::lazy;

/// The pieces file in a generation stored in pieces (instead of `nftables.json`).
pub const PARTS_FILE: &str = "nftables.json.parts";
/// Shared chunks of element lists, by sha256 of their bytes.
pub const BLOBS_DIR: &str = "blobs";
/// Documents smaller than this are stored whole (the compiler's compact text: one element a
/// line).
const MIN_SPLIT: usize = 512 << 10;
/// A chunk ends before an element line whose content hash has these bits clear, once it holds
/// at least `MIN_CHUNK` bytes: on average 8,192 element lines after those bytes.
const CUT_MASK: u64 = (1 << 13) - 1;
const MIN_CHUNK: usize = 64 << 10;

/// `nftables.json.parts`: the file's pieces in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parts {
    pub version: u32,
    pub pieces: Vec<Piece>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Piece {
    /// Bytes of the file as they are.
    Text { text: String },
    /// A chunk of an element list: `D/blobs/<blob>`, `len` bytes.
    Blob { blob: String, len: usize },
}

/// (length, first and last 32 bytes) of a chunk: where to look for an equal one.
fn sig(c: &str) -> (usize, &[u8], &[u8]) {
    let b = c.as_bytes();
    (b.len(), &b[..b.len().min(32)], &b[b.len().saturating_sub(32)..])
}

/// The pieces of `text` as (piece, bytes) where a blob's bytes are its chunk; None: store it
/// whole (small, or not the compiler's form).
pub fn cut(text: &str) -> Option<Vec<(bool, &str)>> {
    if text.len() < MIN_SPLIT {
        return None;
    }
    let split = lazy::split(text)?;
    let mut out = Vec::new();
    let mut last = 0;
    let mut ranges: Vec<_> = split.raw.iter().map(|r| (r.range.clone(), r.indent)).collect();
    ranges.sort_by_key(|(r, _)| r.start);
    for (r, indent) in ranges {
        // The array's first element line (after "[\n") to its closing line (exclusive).
        let body_start = r.start + 2;
        let body_end = text[..r.end].rfind('\n')? + 1;
        if body_start >= body_end {
            continue;
        }
        out.push((false, &text[last..body_start]));
        let t = text.as_bytes();
        let mut chunk = body_start;
        let mut line = body_start;
        while line < body_end {
            let eol = line + memchr::memchr(b'\n', &t[line..body_end])? + 1;
            let starts = t.len() > line + indent && t[line + indent] != b' ' && t[line + indent] != b']' && t[line + indent] != b'}';
            if starts && line - chunk >= MIN_CHUNK && line_hash(&t[line..eol]) & CUT_MASK == 0 {
                out.push((true, &text[chunk..line]));
                chunk = line;
            }
            line = eol;
        }
        out.push((true, &text[chunk..body_end]));
        last = body_end;
    }
    out.push((false, &text[last..]));
    Some(out)
}

/// A cheap hash of an element line (its last 16 bytes: the end of the value, where addresses
/// differ), for chunk cuts only: a cut's place depends on that element alone.
fn line_hash(line: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in &line[line.len().saturating_sub(16)..] {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    h ^ (h >> 29)
}

/// Write the pieces of `text` into generation dir `gen` (its `PARTS_FILE`) and the chunks not
/// yet in `blobs` (each written to a temp file, fsynced, renamed). `write` writes a file
/// durably. `prev`: the text of the generation before and its dir: a chunk equal to one of its
/// chunks (compared byte for byte) takes that name without being hashed. None: `text` is
/// stored whole.
pub fn store(text: &str, prev: Option<(&str, &Path)>, gen: &Path, blobs: &Path, write: impl Fn(&Path, &[u8]) -> Result<()>) -> Result<Option<()>> {
    let Some(pieces) = cut(text) else { return Ok(None) };
    // The chunks of the generation before, by (length, first and last bytes).
    type Sig<'a> = (usize, &'a [u8], &'a [u8]);
    let mut known: std::collections::HashMap<Sig<'_>, Vec<(&str, String)>> = std::collections::HashMap::new();
    // Its pieces give each chunk's place in its text (no need to cut it again).
    let prev_parts = prev.and_then(|(t, dir)| Some((t, serde_json::from_slice::<Parts>(&std::fs::read(dir.join(PARTS_FILE)).ok()?).ok()?)));
    if let Some((ptext, parts)) = &prev_parts {
        let mut at = 0;
        for p in &parts.pieces {
            let len = match p {
                Piece::Text { text } => text.len(),
                Piece::Blob { len, .. } => *len,
            };
            let Some(c) = ptext.get(at..at + len) else { break };
            if let Piece::Blob { blob, .. } = p {
                known.entry(sig(c)).or_default().push((c, blob.clone()));
            }
            at += len;
        }
    }
    super::private_dir::create_private_dir(blobs)?;
    let mut parts = Parts { version: 1, pieces: Vec::with_capacity(pieces.len()) };
    let mut wrote_blob = false;
    for (blob, bytes) in pieces {
        if !blob {
            parts.pieces.push(Piece::Text { text: bytes.to_string() });
            continue;
        }
        let same = known.get(&sig(bytes)).and_then(|v| v.iter().find(|(c, _)| *c == bytes)).map(|(_, n)| n.clone());
        let name = same.unwrap_or_else(|| sha256_hex(bytes.as_bytes()));
        let path = blobs.join(&name);
        let present = std::fs::metadata(&path).is_ok_and(|m| m.len() == bytes.len() as u64);
        if !present {
            let tmp = blobs.join(format!(".tmp-{name}-{}", std::process::id()));
            write(&tmp, bytes.as_bytes())?;
            std::fs::rename(&tmp, &path).into_diagnostic().wrap_err_with(|| format!("cannot rename {}", tmp.display()))?;
            wrote_blob = true;
        }
        parts.pieces.push(Piece::Blob { blob: name, len: bytes.len() });
    }
    if wrote_blob {
        std::fs::File::open(blobs).and_then(|d| d.sync_all()).into_diagnostic()?;
    }
    write(&gen.join(PARTS_FILE), serde_json::to_string(&parts).into_diagnostic()?.as_bytes())?;
    Ok(Some(()))
}

/// The bytes of a generation's `nftables.json` stored in pieces (checked by the caller against
/// the digest in `applied.json`).
pub fn assemble(gen: &Path, blobs: &Path) -> Result<Vec<u8>> {
    let path = gen.join(PARTS_FILE);
    let parts: Parts = serde_json::from_slice(&std::fs::read(&path).into_diagnostic().wrap_err_with(|| format!("cannot read {}", path.display()))?)
        .into_diagnostic()
        .wrap_err_with(|| format!("corrupt {}", path.display()))?;
    let total = parts.pieces.iter().map(|p| match p {
        Piece::Text { text } => text.len(),
        Piece::Blob { len, .. } => *len,
    });
    let mut out = Vec::with_capacity(total.sum());
    for p in &parts.pieces {
        match p {
            Piece::Text { text } => out.extend_from_slice(text.as_bytes()),
            Piece::Blob { blob, len } => {
                if blob.len() != 64 || !blob.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(miette!("{} names blob {blob:?}, which is not a blob name", path.display()));
                }
                let b = std::fs::read(blobs.join(blob)).into_diagnostic().wrap_err_with(|| format!("cannot read blob {blob} of {}", path.display()))?;
                if b.len() != *len {
                    return Err(miette!("blob {blob} of {} has {} bytes, {len} expected", path.display(), b.len()));
                }
                out.extend_from_slice(&b);
            }
        }
    }
    Ok(out)
}

/// The blobs a generation dir refers to (none when stored whole or unreadable).
pub fn blobs_of(gen: &Path) -> Vec<String> {
    let Ok(bytes) = std::fs::read(gen.join(PARTS_FILE)) else { return Vec::new() };
    let Ok(parts) = serde_json::from_slice::<Parts>(&bytes) else { return Vec::new() };
    parts
        .pieces
        .into_iter()
        .filter_map(|p| match p {
            Piece::Blob { blob, .. } => Some(blob),
            Piece::Text { .. } => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(elems: &[String]) -> String {
        let v = serde_json::json!({"nftables": [
            {"add": {"table": {"family": "inet", "name": "fwc"}}},
            {"add": {"set": {"family": "inet", "table": "fwc", "name": "big_v4_32", "type": "ipv4_addr", "elem": elems}}},
            {"add": {"set": {"family": "inet", "table": "fwc", "name": "small", "type": "ipv4_addr", "elem": ["1.1.1.1"]}}},
        ]});
        fwc_compiler::artifacts::to_pretty(&v)
    }

    /// The pieces put together are the text; a one-element change leaves all but one or two
    /// chunks as they were.
    #[test]
    fn pieces_reassemble_the_text_and_a_change_touches_one_chunk() {
        let mut elems: Vec<String> = (0..200_000u32).map(|i| format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255)).collect();
        let a = doc(&elems);
        let pa = cut(&a).expect("big enough to cut");
        assert_eq!(pa.iter().map(|(_, t)| *t).collect::<String>(), a);
        assert!(pa.iter().filter(|(b, _)| *b).count() > 10, "{}", pa.len());
        elems.remove(123_456);
        let b = doc(&elems);
        let pb = cut(&b).unwrap();
        assert_eq!(pb.iter().map(|(_, t)| *t).collect::<String>(), b);
        let old: std::collections::HashSet<&str> = pa.iter().filter(|(b, _)| *b).map(|(_, t)| *t).collect();
        let new_chunks = pb.iter().filter(|(b, t)| *b && !old.contains(t)).count();
        assert!(new_chunks <= 2, "{new_chunks} chunks changed");
        assert!(cut(&doc(&elems[..10])).is_none(), "small documents are stored whole");
    }
}
