//! One host's four artifacts as a value ([`Artifacts`]), their file names, the exact bytes
//! written for each, reading an artifact directory back, and content hashes.

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
    /// The exact bytes of each artifact file, in a stable order. Every JSON file is pretty
    /// printed with a trailing newline so diffs and hashes are stable. `nftables.json` is
    /// borrowed, not copied (it can be hundreds of MB).
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
        fn read<T: serde::de::DeserializeOwned>(dir: &Path, name: &str) -> Result<T, ArtifactReadError> {
            let path = dir.join(name);
            let text = std::fs::read_to_string(&path)
                .map_err(|e| ArtifactReadError { path: path.display().to_string(), reason: e.to_string() })?;
            serde_json::from_str(&text)
                .map_err(|e| ArtifactReadError { path: path.display().to_string(), reason: e.to_string() })
        }
        Ok(Artifacts {
            nftables: NftDoc::from(read::<serde_json::Value>(dir, NFTABLES_FILE)?),
            qos: read(dir, QOS_FILE)?,
            forward: read(dir, FORWARD_FILE)?,
            manifest: read(dir, MANIFEST_FILE)?,
        })
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
    let mut h = HashWriter(Sha256::new());
    serde_json::to_writer_pretty(&mut h, v).expect("artifacts always serialize");
    h.0.update(b"\n");
    hex::encode(h.0.finalize())
}

/// `sha256_hex(serde_json::to_string(v))` without building the text.
pub fn sha256_compact<T: Serialize>(v: &T) -> String {
    let mut h = HashWriter(Sha256::new());
    serde_json::to_writer(&mut h, v).expect("artifacts always serialize");
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
