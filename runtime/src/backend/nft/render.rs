//! The kernel's rendering of an nftables.json document: loaded into a private, empty network
//! namespace (`unshare -n`) and listed back, cached in memory and in the state dir's cache.

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

use fwc_compiler::artifacts::sha256_hex;
use miette::{miette, IntoDiagnostic, Result, WrapErr};
use serde_json::{json, Value};

use super::cmd::clean_nft_error;
use super::doc::{is_empty_doc, replace_tx};
use super::NftBackend;

/// A scratch-namespace rendering in progress.
pub(super) struct Render {
    key: String,
    child: std::process::Child,
    _file: tempfile::NamedTempFile,
}

impl NftBackend {
    /// How the kernel renders `nftables` when listed: load it into a private, empty network
    /// namespace (`unshare -n`) and list it there. Cached per document (memory and cache dir).
    pub fn canonical(&mut self, nftables: &Value) -> Result<Value> {
        match self.start_render(nftables)? {
            Ok(v) => Ok(v),
            Err(r) => self.finish_render(r),
        }
    }

    fn cache_file(&self, key: &str) -> Option<PathBuf> {
        self.cache_dir.as_ref().map(|d| d.join(format!("nft-render-{}.json", &key[..24])))
    }

    /// The rendering if cached (`Ok`), else a started scratch-namespace render (`Err`).
    fn start_render(&mut self, nftables: &Value) -> Result<std::result::Result<Value, Render>> {
        let key = sha256_hex(format!("{}\n{}", self.cmd.nft, serde_json::to_string(nftables).unwrap()).as_bytes());
        if let Some(v) = self.canonical.get(&key) {
            return Ok(Ok(v.clone()));
        }
        if is_empty_doc(nftables)? {
            let v = json!({"nftables": []});
            self.canonical.insert(key, v.clone());
            return Ok(Ok(v));
        }
        if let Some(v) = self.cache_file(&key).and_then(|f| std::fs::read(f).ok()).and_then(|b| serde_json::from_slice::<Value>(&b).ok()) {
            self.canonical.insert(key, v.clone());
            return Ok(Ok(v));
        }
        let mut tmp = tempfile::Builder::new().prefix("fwc-nft-").suffix(".json").tempfile().into_diagnostic()?;
        tmp.write_all(&serde_json::to_vec(&replace_tx(nftables)?).into_diagnostic()?).into_diagnostic()?;
        tmp.flush().into_diagnostic()?;
        let child = Command::new("unshare")
            .env("TZ", "UTC")
            .args(["-n", "sh", "-c", "\"$1\" -j -f \"$2\" && \"$1\" -j list table inet fwc", "sh", &self.cmd.nft])
            .arg(tmp.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .into_diagnostic()
            .wrap_err("cannot run unshare -n (util-linux) to render the ruleset")?;
        Ok(Err(Render { key, child, _file: tmp }))
    }

    fn finish_render(&mut self, r: Render) -> Result<Value> {
        let out = r.child.wait_with_output().into_diagnostic()?;
        if !out.status.success() {
            return Err(miette!(
                "cannot render nftables.json in a scratch namespace: {}",
                clean_nft_error(&String::from_utf8_lossy(&out.stderr))
            ));
        }
        let v: Value = serde_json::from_slice(&out.stdout).into_diagnostic()?;
        if let Some(f) = self.cache_file(&r.key) {
            let dir = f.parent().unwrap().to_path_buf();
            if std::fs::create_dir_all(&dir).is_ok() && crate::state::write_atomic(&f, &out.stdout).is_ok() {
                gc_cache(&dir, 4);
            }
        }
        self.canonical.insert(r.key, v.clone());
        Ok(v)
    }
}

/// Keep the `keep` most recently written files of a cache dir.
pub(super) fn gc_cache(dir: &std::path::Path, keep: usize) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    let mut files: Vec<(std::time::SystemTime, PathBuf)> =
        rd.flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("nft-render-"))
            .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
            .collect();
    files.sort();
    files.reverse();
    for (_, p) in files.into_iter().skip(keep) {
        let _ = std::fs::remove_file(p);
    }
}
