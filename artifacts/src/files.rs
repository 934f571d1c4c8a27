//! One host's four artifacts as a value ([`Artifacts`]), their file names, the exact bytes
//! written for each, reading an artifact directory back, and content hashes.

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use std::borrow::Cow;

use crate::{ForwardArtifact, Manifest, NftDoc, QosArtifact};

/// All four artifacts of one host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Artifacts {
    /// libnftables JSON (`{"nftables": [...]}`) that creates `table inet fwc` from scratch.
    pub nftables: NftDoc,
    pub qos: QosArtifact,
    pub forward: ForwardArtifact,
    pub manifest: Manifest,
}

/// File names of the artifacts inside an artifact directory.
pub const NFTABLES_FILE: &str = "nftables.json";
pub const QOS_FILE: &str = "qos.json";
pub const FORWARD_FILE: &str = "forward.json";
pub const MANIFEST_FILE: &str = "manifest.json";

impl Artifacts {
    /// The exact bytes of each artifact file, in a stable order. `nftables.json` is the
    /// compact, line-per-command text of [`crate::nfttext`], borrowed, not copied (it can be
    /// hundreds of MB); the others are pretty printed. All end with a newline.
    pub fn files(&self) -> Vec<(&'static str, Cow<'_, str>)> {
        vec![
            (NFTABLES_FILE, Cow::Borrowed(self.nftables.text())),
            (QOS_FILE, Cow::Owned(to_pretty(&self.qos))),
            (FORWARD_FILE, Cow::Owned(to_pretty(&self.forward))),
            (MANIFEST_FILE, Cow::Owned(to_pretty(&self.manifest))),
        ]
    }

    /// Read an artifact directory written by [`Artifacts::files`] (`fwc compile --out`, the state dir).
    pub fn read_dir(dir: &Path) -> Result<Artifacts, ArtifactReadError> {
        let path = dir.join(NFTABLES_FILE);
        let text = std::fs::read_to_string(&path).map_err(|e| ArtifactReadError { path: path.display().to_string(), reason: e.to_string() })?;
        Artifacts::read_dir_with(dir, text, None)
    }

    /// [`Artifacts::read_dir`] with the text of `nftables.json` given (a state dir stores a big
    /// one in pieces and puts it together), and its sha256 when the caller has computed it.
    pub fn read_dir_with(dir: &Path, nftables_text: String, sha256: Option<String>) -> Result<Artifacts, ArtifactReadError> {
        fn read<T: serde::de::DeserializeOwned>(dir: &Path, name: &str) -> Result<T, ArtifactReadError> {
            let path = dir.join(name);
            let text = std::fs::read_to_string(&path)
                .map_err(|e| ArtifactReadError { path: path.display().to_string(), reason: e.to_string() })?;
            serde_json::from_str(&text)
                .map_err(|e| ArtifactReadError { path: path.display().to_string(), reason: e.to_string() })
        }
        let manifest: Manifest = read(dir, MANIFEST_FILE)?;
        // The file the compiler wrote (its digest is the manifest's) is kept as text, parsed
        // only when read as a tree: a million-element set is not parsed to be diffed or
        // stored again. Any other file is parsed here, so it is valid JSON.
        let digest = sha256.unwrap_or_else(|| sha256_hex(nftables_text.as_bytes()));
        let nftables = if manifest.artifact_hashes.get(NFTABLES_FILE).is_some_and(|h| *h == digest) {
            NftDoc::from_pretty_text_with_digest(nftables_text, digest)
        } else {
            let path = dir.join(NFTABLES_FILE);
            NftDoc::from(
                serde_json::from_str::<serde_json::Value>(&nftables_text)
                    .map_err(|e| ArtifactReadError { path: path.display().to_string(), reason: e.to_string() })?,
            )
        };
        Ok(Artifacts { nftables, qos: read(dir, QOS_FILE)?, forward: read(dir, FORWARD_FILE)?, manifest })
    }
}

#[derive(Debug, thiserror::Error)]
#[error("cannot read artifact {path}: {reason}")]
pub struct ArtifactReadError {
    pub path: String,
    pub reason: String,
}

pub fn to_pretty<T: Serialize>(v: &T) -> String {
    let mut s = serde_json::to_string_pretty(v).expect("artifacts always serialize");
    s.push('\n');
    s
}

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
