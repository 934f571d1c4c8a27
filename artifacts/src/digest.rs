//! Content hashes of artifacts: sha256 of bytes, and of a value's JSON text (pretty as the
//! files are written, or compact) streamed into the hash without building the text.

use std::io::Write;

use serde::Serialize;
use sha2::{Digest, Sha256};

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// `sha256_hex(to_pretty(v))` without building the text (artifacts can be tens of MB).
pub fn sha256_pretty<T: Serialize>(v: &T) -> String {
    let mut h = hash_writer();
    serde_json::to_writer_pretty(&mut h, v).expect("artifacts always serialize");
    h.write_all(b"\n").expect("hashing does not fail");
    finish(h)
}

/// `sha256_hex(serde_json::to_string(v))` without building the text.
pub fn sha256_compact<T: Serialize>(v: &T) -> String {
    let mut h = hash_writer();
    serde_json::to_writer(&mut h, v).expect("artifacts always serialize");
    finish(h)
}

/// serde_json writes a token at a time (a quote, a colon, a few bytes): buffered, the hash is
/// fed in blocks instead of once per token (same bytes, same digest, far fewer calls).
fn hash_writer() -> std::io::BufWriter<HashWriter> {
    std::io::BufWriter::with_capacity(4096, HashWriter(Sha256::new()))
}

fn finish(h: std::io::BufWriter<HashWriter>) -> String {
    let h = h.into_inner().unwrap_or_else(|_| unreachable!("hashing does not fail"));
    hex::encode(h.0.finalize())
}

/// An `io::Write` that feeds a hash.
struct HashWriter(Sha256);

impl std::io::Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::to_pretty;

    /// The streamed digests are the digests of the texts (small and over-buffer values).
    #[test]
    fn streamed_digests_equal_the_digests_of_the_text() {
        let big: Vec<String> = (0..2000).map(|i| format!("element {i} \"quoted\"")).collect();
        let small = serde_json::json!({"a": [1, 2, {"b": "c"}], "d": null});
        assert_eq!(sha256_compact(&big), sha256_hex(serde_json::to_string(&big).unwrap().as_bytes()));
        assert_eq!(sha256_compact(&small), sha256_hex(serde_json::to_string(&small).unwrap().as_bytes()));
        assert_eq!(sha256_pretty(&big), sha256_hex(to_pretty(&big).as_bytes()));
        assert_eq!(sha256_pretty(&small), sha256_hex(to_pretty(&small).as_bytes()));
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
