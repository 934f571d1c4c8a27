//! The bytes of `nftables.json`: compact JSON, one command of the `nftables` array per line,
//! except the element lists of sets and maps, which are one element per line:
//!
//! ```text
//! {"nftables":[
//! {"add":{"table":{"family":"inet","name":"fwc"}}},
//! {"add":{"set":{"family":"inet","table":"fwc","name":"s","type":"ipv4_addr","flags":["interval"],
//! "elem": [
//!   "192.0.2.1",
//!   {"prefix":{"addr":"198.51.100.0","len":24}}
//! ]}}}
//! ]}
//! ```
//!
//! A third of the size of serde_json's pretty printing (whose indentation was most of a big
//! ruleset's bytes) and still line-oriented where it matters: an element added to or removed
//! from a set changes one line (the runtime compares two generations' element lists as text and
//! stores them in content-defined chunks of lines). The compiler writes this text as it goes
//! ([`push_member`]); [`render`] gives the same bytes for a document held as a JSON tree.

use serde_json::Value;

/// The document's opening line.
pub const HEAD: &[u8] = b"{\"nftables\":[";

/// What ends a document with `members` commands (after the last one).
pub fn tail(members: usize) -> &'static [u8] {
    if members == 0 {
        b"]}\n"
    } else {
        b"\n]}\n"
    }
}

/// Append one command, given as compact JSON (serde_json's `to_writer`), as the next line of a
/// document that already holds `before` commands: its `"elem"` arrays written one element per
/// line.
pub fn push_member(out: &mut Vec<u8>, before: usize, compact: &[u8]) {
    out.extend_from_slice(if before == 0 { b"\n" } else { b",\n" });
    let mut rest = compact;
    while let Some(at) = elem_key(rest) {
        // `at` is the `,` or `{` before the key; the array opens at `at + 8`.
        let open = at + 1 + ELEM_KEY.len();
        out.extend_from_slice(&rest[..=at]);
        out.extend_from_slice(b"\n\"elem\": [");
        let len = elem_lines(out, &rest[open..]);
        rest = &rest[open + len..];
    }
    out.extend_from_slice(rest);
}

/// The key of an element list in compact JSON.
const ELEM_KEY: &[u8] = b"\"elem\":[";

/// Offset of the `,` or `{` that precedes the next non-empty `"elem":[` key. Inside a string a
/// quote is escaped (`\"`), so the bytes `,"elem":[` can only be a key.
fn elem_key(s: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(q) = s[from..].iter().position(|&b| b == b'"') {
        let q = from + q;
        if q > 0 && matches!(s[q - 1], b',' | b'{') && s[q..].starts_with(ELEM_KEY) && s.get(q + ELEM_KEY.len()) != Some(&b']') {
            return Some(q - 1);
        }
        from = q + 1;
    }
    None
}

/// Write the elements of the array whose items start at `s` (just past its `[`), one per line
/// indented by two spaces, and its closing `]` on a line of its own; returns the bytes of `s`
/// consumed (through the `]`).
fn elem_lines(out: &mut Vec<u8>, s: &[u8]) -> usize {
    out.extend_from_slice(b"\n  ");
    let (mut depth, mut in_str, mut esc) = (0usize, false, false);
    let mut copied = 0;
    for (i, &b) in s.iter().enumerate() {
        if in_str {
            match (esc, b) {
                (true, _) => esc = false,
                (false, b'\\') => esc = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'[' | b'{' => depth += 1,
            b']' | b'}' if depth > 0 => depth -= 1,
            b']' => {
                out.extend_from_slice(&s[copied..i]);
                out.extend_from_slice(b"\n]");
                return i + 1;
            }
            b',' if depth == 0 => {
                out.extend_from_slice(&s[copied..i]);
                out.extend_from_slice(b",\n  ");
                copied = i + 1;
            }
            _ => {}
        }
    }
    unreachable!("compact JSON closes its arrays")
}

/// The text of a whole document held as a tree, byte for byte what the compiler writes for it.
/// A value that is not `{"nftables": [...]}` is written as compact JSON.
pub fn render(v: &Value) -> String {
    let Some(items) = v.as_object().filter(|o| o.len() == 1).and_then(|o| o.get("nftables")).and_then(Value::as_array) else {
        let mut s = serde_json::to_string(v).expect("JSON values serialize");
        s.push('\n');
        return s;
    };
    let mut out = HEAD.to_vec();
    let mut one = Vec::new();
    for (i, item) in items.iter().enumerate() {
        one.clear();
        serde_json::to_writer(&mut one, item).expect("JSON values serialize");
        push_member(&mut out, i, &one);
    }
    out.extend_from_slice(tail(items.len()));
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn commands_one_per_line_and_elements_one_per_line() {
        let doc = json!({"nftables": [
            {"add": {"table": {"family": "inet", "name": "fwc"}}},
            {"add": {"set": {"name": "s", "flags": ["interval"], "elem": ["192.0.2.1", {"prefix": {"addr": "198.51.100.0", "len": 24}}]}}},
            {"add": {"set": {"name": "empty", "elem": []}}},
            {"add": {"map": {"name": "m", "elem": [[{"concat": [1, "a,]"]}, "x\"elem\":[y"]]}}},
            {"add": {"rule": {"comment": ",\"elem\":[1,2]", "expr": []}}}
        ]});
        let text = render(&doc);
        assert_eq!(
            text,
            "{\"nftables\":[\n\
             {\"add\":{\"table\":{\"family\":\"inet\",\"name\":\"fwc\"}}},\n\
             {\"add\":{\"set\":{\"name\":\"s\",\"flags\":[\"interval\"],\n\"elem\": [\n  \"192.0.2.1\",\n  {\"prefix\":{\"addr\":\"198.51.100.0\",\"len\":24}}\n]}}},\n\
             {\"add\":{\"set\":{\"name\":\"empty\",\"elem\":[]}}},\n\
             {\"add\":{\"map\":{\"name\":\"m\",\n\"elem\": [\n  [{\"concat\":[1,\"a,]\"]},\"x\\\"elem\\\":[y\"]\n]}}},\n\
             {\"add\":{\"rule\":{\"comment\":\",\\\"elem\\\":[1,2]\",\"expr\":[]}}}\n\
             ]}\n"
        );
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), doc);
        assert_eq!(render(&json!({"nftables": []})), "{\"nftables\":[]}\n");
    }
}
