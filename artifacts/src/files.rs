//! One host's four artifacts as a value ([`Artifacts`]), their file names, the exact bytes
//! written for each (streamed into a writer, or as texts), and reading an artifact directory
//! back (content hashes: [`crate::digest`]).

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use std::borrow::Cow;

use crate::{sha256_hex, ForwardArtifact, Manifest, NftDoc, QosArtifact};

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

/// The artifact files in the order [`Artifacts::files`] gives them.
pub const FILE_NAMES: [&str; 4] = [NFTABLES_FILE, QOS_FILE, FORWARD_FILE, MANIFEST_FILE];

/// The three JSON artifacts beside `nftables.json`: what is left to write when that file was
/// written into its writer as it was emitted (`fwc_compiler::emit_view_to`). The manifest is a
/// [`Manifest`], or anything serialised as one (the compiler's manifest that makes its rules as
/// it is written).
#[derive(Debug, Clone, PartialEq)]
pub struct JsonArtifacts<M = Manifest> {
    pub qos: QosArtifact,
    pub forward: ForwardArtifact,
    pub manifest: M,
}

/// The files of [`JsonArtifacts`], in the order [`Artifacts::files`] gives them.
pub const JSON_FILE_NAMES: [&str; 3] = [QOS_FILE, FORWARD_FILE, MANIFEST_FILE];

impl<M: Serialize> JsonArtifacts<M> {
    /// [`Artifacts::write_file`] of one of [`JSON_FILE_NAMES`].
    pub fn write_file(&self, name: &str, w: &mut impl Write) -> std::io::Result<()> {
        write_json_file(name, &self.qos, &self.forward, &self.manifest, w)
    }
}

/// The bytes of a JSON artifact file (not `nftables.json`) serialised straight into `w`.
fn write_json_file(name: &str, qos: &QosArtifact, forward: &ForwardArtifact, manifest: &impl Serialize, w: &mut impl Write) -> std::io::Result<()> {
    match name {
        QOS_FILE => write_pretty(w, qos),
        FORWARD_FILE => write_pretty(w, forward),
        MANIFEST_FILE => write_lines(w, manifest),
        _ => Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{name} is not an artifact file"))),
    }
}

impl Artifacts {
    /// Write the exact bytes of the artifact file `name` (one of [`FILE_NAMES`]) into `w`, as
    /// they are produced: `nftables.json` from the text the document holds, the others
    /// serialised straight into `w` (no text of the whole file is built). `w` need not be
    /// buffered; it is flushed at the end.
    pub fn write_file(&self, name: &str, w: &mut impl Write) -> std::io::Result<()> {
        match name {
            NFTABLES_FILE => {
                w.write_all(self.nftables.text().as_bytes())?;
                w.flush()
            }
            _ => write_json_file(name, &self.qos, &self.forward, &self.manifest, w),
        }
    }

    /// The exact bytes of each artifact file, in a stable order. `nftables.json` is the
    /// compact, line-per-command text of [`crate::nfttext`], borrowed, not copied (it can be
    /// hundreds of MB); `manifest.json` is compact with a line per rule ([`write_lines`]); the
    /// others are pretty printed. All end with a newline.
    pub fn files(&self) -> Vec<(&'static str, Cow<'_, str>)> {
        vec![
            (NFTABLES_FILE, Cow::Borrowed(self.nftables.text())),
            (QOS_FILE, Cow::Owned(to_pretty(&self.qos))),
            (FORWARD_FILE, Cow::Owned(to_pretty(&self.forward))),
            (MANIFEST_FILE, Cow::Owned(to_lines(&self.manifest))),
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

/// [`to_pretty`] of `v` written into `w` as it is serialised (buffered here), then flushed.
pub fn write_pretty<T: Serialize>(w: &mut impl Write, v: &T) -> std::io::Result<()> {
    let mut b = std::io::BufWriter::with_capacity(1 << 16, w);
    serde_json::to_writer_pretty(&mut b, v)?;
    b.write_all(b"\n")?;
    b.flush()
}

pub fn to_pretty<T: Serialize>(v: &T) -> String {
    let mut s = serde_json::to_string_pretty(v).expect("artifacts always serialize");
    s.push('\n');
    s
}

/// `v` as compact JSON with each element of its top-level arrays on a line of its own
/// (`manifest.json`: a line per rule), written into `w` as it is serialised, then flushed. A
/// manifest's rules are most of its bytes; pretty printed, their indentation was a third of
/// them and of the time to write them, and one line per rule still reads as a diff.
pub fn write_lines<T: Serialize>(w: &mut impl Write, v: &T) -> std::io::Result<()> {
    let mut b = std::io::BufWriter::with_capacity(1 << 16, w);
    v.serialize(&mut serde_json::Serializer::with_formatter(&mut b, LinePerEntry::default()))?;
    b.write_all(b"\n")?;
    b.flush()
}

/// [`write_lines`] as a text.
pub fn to_lines<T: Serialize>(v: &T) -> String {
    let mut out = Vec::new();
    write_lines(&mut out, v).expect("artifacts always serialize");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// serde_json's compact form, with a line break before each element of an array in the top
/// object, and before that array's `]`.
#[derive(Default)]
struct LinePerEntry {
    depth: usize,
    /// The array being closed had its elements on lines of their own.
    broke: bool,
}

impl serde_json::ser::Formatter for LinePerEntry {
    fn begin_object<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.depth += 1;
        w.write_all(b"{")
    }
    fn end_object<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.depth -= 1;
        w.write_all(b"}")
    }
    fn begin_array<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.depth += 1;
        if self.depth == 2 {
            self.broke = false;
        }
        w.write_all(b"[")
    }
    fn end_array<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.depth -= 1;
        if self.depth == 1 && std::mem::take(&mut self.broke) {
            w.write_all(b"\n]")
        } else {
            w.write_all(b"]")
        }
    }
    fn begin_array_value<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        match (self.depth == 2, first) {
            (true, true) => {
                self.broke = true;
                w.write_all(b"\n")
            }
            (true, false) => w.write_all(b",\n"),
            (false, true) => Ok(()),
            (false, false) => w.write_all(b","),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line per element of the top object's arrays, compact inside; the same value read back.
    #[test]
    fn lines_hold_one_element_of_a_top_array_each() {
        let v = serde_json::json!({"version": 1, "rules": [{"name": "a", "backends": ["nftables", "qos"]}, {"name": "b\n", "backends": []}], "none": [], "setup": {"sysctls": [1, 2]}});
        let text = to_lines(&v);
        assert_eq!(text, "{\"version\":1,\"rules\":[\n{\"name\":\"a\",\"backends\":[\"nftables\",\"qos\"]},\n{\"name\":\"b\\n\",\"backends\":[]}\n],\"none\":[],\"setup\":{\"sysctls\":[1,2]}}\n");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&text).unwrap(), v);
    }
}
