//! `fwc import`: adopt an existing firewall (nftables, iptables, ufw, firewalld) as a rule
//! repository, with proof. `source` reads the original (the only I/O besides writing the
//! result), `translate` turns its nftables JSON into fwc rules, `render` writes them as KDL,
//! `proof` samples flows and evaluates the original (and the import) with fwc's evaluator.
//! firewalld is translated from its XML (`firewalld`, read by `firewalld_source`), and proved
//! against the ruleset firewalld itself builds from it.

pub mod error;
pub mod firewalld;
pub mod firewalld_source;
pub mod ifnames;
pub mod model;
pub mod naming;
pub mod owners;
pub mod ports;
pub mod proof;
pub mod render;
pub mod source;
pub mod translate;
pub mod words;
pub mod xt_icmp;

use std::path::{Path, PathBuf};

use serde_json::Value;

use fwc_compiler::eval::{foreign, Evaluator, Flow};
pub use error::ImportError;
pub use model::{Imported, Refusal};
pub use words::{describe, describe_rule};
pub use proof::Difference;

/// What the original is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Nft,
    Iptables,
    Ufw,
    Firewalld,
}

/// A finished import, before it is written.
#[derive(Debug, Clone)]
pub struct Import {
    pub imported: Imported,
    /// (path relative to the output directory, content)
    pub files: Vec<(String, String)>,
    /// The flows of the proof, with what the original does to them.
    pub flows: Vec<Flow>,
    /// The original without the parts others own (what the proof evaluates).
    pub listing: Value,
    /// Why no proof was written (--partial and the evaluator could not run the original).
    pub proof_missing: Option<String>,
}

/// Seeded random flows added to the systematic sample.
pub const RANDOM_FLOWS: usize = 200;
pub const SEED: u64 = 0x5eed_f00d;

/// The pure part: listing -> rules, files and proof. `partial`: refusals become warnings.
pub fn import(listing: Value, origins: &translate::Origins, source: &str, partial: bool, progress: &mut dyn FnMut(&str)) -> Result<Import, ImportError> {
    import_with_notes(listing, origins, source, Vec::new(), partial, progress)
}

/// [`import`], with notes from reading the source (they come first in the summary).
pub fn import_with_notes(listing: Value, origins: &translate::Origins, source: &str, notes: Vec<String>, partial: bool, progress: &mut dyn FnMut(&str)) -> Result<Import, ImportError> {
    progress("translating");
    let mut imported = translate::translate(&listing, origins);
    imported.notes.splice(0..0, notes);
    finish(imported, Some(listing), origins, source, partial, progress)
}

/// Rules translated (from the listing, or from firewalld's XML), rendered and proved against
/// `listing`, the original as nftables JSON (`None`: no proof, and the reason is said).
pub fn finish(mut imported: Imported, listing: Option<Value>, origins: &translate::Origins, source: &str, partial: bool, progress: &mut dyn FnMut(&str)) -> Result<Import, ImportError> {
    ports::check(&mut imported);
    if !imported.refused.is_empty() && !partial {
        return Err(ImportError::Refused(imported.refused.clone()));
    }
    let mut files = render::files(&imported, source);
    let Some(listing) = listing else {
        let flows = proof::sample(&imported, &[], RANDOM_FLOWS, SEED);
        let why = "--skip-proof: the original's own ruleset was not built, so nothing proves the import".to_string();
        return Ok(Import { imported, files, flows, listing: Value::Null, proof_missing: Some(why) });
    };
    let names = identities(&listing, origins);
    let listing = translate::strip_owned(&listing);
    let flows = proof::sample(&imported, &translate::probe_chains(&listing), RANDOM_FLOWS, SEED);
    progress(&format!("evaluating the original on {} flows", flows.len()));
    let mut proof_missing = None;
    let located = |e: fwc_compiler::eval::EvalError| eval_reason(&e, origins);
    match foreign::table_from_listing(&listing).map(Evaluator::from_table) {
        Ok(ev) => {
            let mut results = Vec::with_capacity(flows.len());
            for f in &flows {
                match ev.explain(f) {
                    Ok(x) => {
                        let mut o = proof::outcome(&x);
                        if let Some(id) = &x.decided_by.identity {
                            if let Some(origin) = names.get(id) {
                                o.by = format!("{origin} ({})", o.by);
                            }
                        }
                        results.push((f.clone(), o))
                    }
                    Err(e) if partial => {
                        proof_missing = Some(located(e));
                        break;
                    }
                    Err(e) => return Err(ImportError::Eval(located(e))),
                }
            }
            if proof_missing.is_none() {
                files.push(("tests/imported.kdl".into(), proof::tests_file(source, &results)));
            }
        }
        Err(e) if partial => proof_missing = Some(located(e)),
        Err(e) => return Err(ImportError::Eval(located(e))),
    }
    Ok(Import { imported, files, flows, listing, proof_missing })
}

fn werr(path: &Path, error: std::io::Error) -> ImportError {
    ImportError::Write { path: path.display().to_string(), error }
}

/// A directory beside `--out` the import is written to, checked in, and moved into place from
/// at the end ([`Staging::commit`]); dropped before that, it is removed with all it holds.
pub struct Staging {
    out: PathBuf,
    tmp: Option<tempfile::TempDir>,
}

impl Staging {
    /// Refuses an `out` that holds a rule repository already.
    pub fn new(out: &Path) -> Result<Staging, ImportError> {
        if out.join("fwc.kdl").exists() {
            return Err(werr(&out.join("fwc.kdl"), std::io::Error::new(std::io::ErrorKind::AlreadyExists, "a rule repository is already there; fwc import never overwrites one")));
        }
        let parent = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&parent).map_err(|e| werr(&parent, e))?;
        let tmp = tempfile::Builder::new().prefix(".fwc-import-").tempdir_in(&parent).map_err(|e| werr(&parent, e))?;
        Ok(Staging { out: out.to_path_buf(), tmp: Some(tmp) })
    }

    pub fn dir(&self) -> &Path {
        self.tmp.as_ref().map(|t| t.path()).expect("not committed yet")
    }

    /// Move the written files into `out`: the directory itself when `out` does not exist,
    /// else each entry (none may exist there yet), `fwc.kdl` last.
    pub fn commit(mut self) -> Result<(), ImportError> {
        let tmp = self.tmp.take().expect("committed once");
        if !self.out.exists() {
            let path = tmp.keep();
            return std::fs::rename(&path, &self.out).map_err(|e| {
                let _ = std::fs::remove_dir_all(&path);
                werr(&self.out, e)
            });
        }
        let mut entries: Vec<std::ffi::OsString> = std::fs::read_dir(tmp.path()).map_err(|e| werr(tmp.path(), e))?.flatten().map(|e| e.file_name()).collect();
        entries.sort_by_key(|n| n == "fwc.kdl");
        if let Some(n) = entries.iter().find(|n| self.out.join(n).exists()) {
            return Err(werr(&self.out.join(n), std::io::Error::new(std::io::ErrorKind::AlreadyExists, "is in the way: fwc import writes into an empty or new directory")));
        }
        for n in entries {
            std::fs::rename(tmp.path().join(&n), self.out.join(&n)).map_err(|e| werr(&self.out.join(&n), e))?;
        }
        Ok(())
    }
}

/// Write the files under `dir` (a [`Staging`] directory).
pub fn write(out: &Path, files: &[(String, String)]) -> Result<(), ImportError> {
    for (rel, text) in files {
        let p = out.join(rel);
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir).map_err(|e| werr(dir, e))?;
        }
        std::fs::write(&p, text).map_err(|e| werr(&p, e))?;
    }
    Ok(())
}

/// `fwc import --from firewalld`: read `dir` (its configuration; the system's definitions from
/// `lib`), translate its XML, and (unless `skip_proof`) run firewalld on a copy for the
/// original ruleset of the proof. `live`: `dir` is the running firewalld's own directory.
pub fn firewalld(dir: &Path, lib: &Path, live: bool, skip_proof: bool, partial: bool, progress: &mut dyn FnMut(&str)) -> Result<(Import, String), ImportError> {
    let (cfg, mut notes) = firewalld_source::read_config(dir, lib)?;
    if live {
        notes.insert(0, format!("--live reads the running firewalld's configuration ({}): changes made with firewall-cmd without --permanent live only in firewalld's memory and are NOT imported; make them permanent first (`firewall-cmd --runtime-to-permanent`), or compare with `fwc import --from nft --live`", dir.display()));
    }
    // The XML first: what fwc refuses (an undefined service) is named by its line before
    // firewalld is started, and names the likely reason when firewalld then fails.
    progress("translating");
    let mut imported = firewalld::translate(&cfg);
    if !imported.refused.is_empty() && !partial {
        return Err(ImportError::Refused(imported.refused.clone()));
    }
    let listing = if skip_proof {
        None
    } else {
        progress("running firewalld on a copy, in a scratch network namespace");
        let (l, complaints) = firewalld_source::ruleset(dir, lib).map_err(|e| match e {
            ImportError::Source { what, hint } if !imported.refused.is_empty() => {
                let seen: Vec<String> = imported.refused.iter().take(5).map(|r| format!("{}: {}", r.origin, r.what)).collect();
                ImportError::Source { what: format!("{what}; fwc's reading of the XML refused: {}", seen.join("; ")), hint }
            }
            e => e,
        })?;
        notes.extend(complaints.into_iter().map(|c| format!("firewalld says: {c}")));
        Some(firewalld::without_helpers(&l))
    };
    imported.notes.splice(0..0, notes);
    let label = format!("firewalld's configuration in {}", dir.display());
    Ok((finish(imported, listing, &Default::default(), &label, partial, progress)?, label))
}

/// `--verify`: the original and the imported rules (compiled from `out`) on every flow.
pub fn verify(listing: &Value, imported: &fwc_compiler::artifacts::Artifacts, flows: &[Flow]) -> Result<Vec<Difference>, ImportError> {
    let e = |e: fwc_compiler::eval::EvalError| ImportError::Eval(e.to_string());
    let original = Evaluator::from_table(foreign::table_from_listing(listing).map_err(e)?);
    let mine = Evaluator::new(imported).map_err(e)?;
    proof::compare(&original, &mine, flows).map_err(e)
}

/// Why the evaluator could not run the original, naming the rule by its origin
/// (`nftables.conf:5`) rather than by its place in the JSON listing.
fn eval_reason(e: &fwc_compiler::eval::EvalError, origins: &translate::Origins) -> String {
    use fwc_compiler::eval::EvalError;
    match e {
        EvalError::Unsupported { chain, rule, what } => {
            let mut parts = chain.splitn(3, ' ');
            let (fam, table, name) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
            match origins.get(&(fam.to_string(), table.to_string(), name.to_string(), *rule)) {
                Some(origin) => format!("{origin}: fwc's evaluator does not model {what} yet"),
                None => format!("rule {} of chain {chain}: fwc's evaluator does not model {what} yet", rule + 1),
            }
        }
        other => other.to_string().trim_start_matches("nftables.json: ").to_string(),
    }
}

/// Read the original (I/O): the listing, the origins of its rules and a label for the header.
/// Also notes on what reading had to change (ufw's `limit`).
pub fn read(kind: Kind, path: Option<&Path>, live: bool, netns: Option<&str>) -> Result<(Value, translate::Origins, String, Vec<String>), ImportError> {
    let need_path = || ImportError::Source { what: "no PATH given".into(), hint: "give the file or directory to import, or --live".into() };
    match (kind, live) {
        (Kind::Nft | Kind::Iptables, true) => {
            let label = match netns {
                Some(ns) => format!("the live ruleset of network namespace {ns}"),
                None => "the live ruleset of this host".into(),
            };
            Ok((source::live_native(netns)?, Default::default(), label, Vec::new()))
        }
        (Kind::Nft, false) => {
            let p = path.ok_or_else(need_path)?;
            let (l, o) = source::nft_file(p)?;
            Ok((l, o, p.display().to_string(), Vec::new()))
        }
        (Kind::Iptables, false) => {
            let p = path.ok_or_else(need_path)?;
            let files = iptables_files(p)?;
            let (l, o) = source::iptables_files(&files)?;
            Ok((l, o, p.display().to_string(), Vec::new()))
        }
        (Kind::Ufw, false) => {
            let p = path.ok_or_else(need_path)?;
            let (l, o, notes) = source::ufw_dir(p)?;
            Ok((l, o, p.display().to_string(), notes))
        }
        (Kind::Firewalld, _) => Err(ImportError::Source { what: "firewalld is read by import::firewalld".into(), hint: String::new() }),
        (Kind::Ufw, _) => Err(ImportError::Source {
            what: "importing from ufw --live is not implemented yet".into(),
            hint: "import the ruleset it loaded instead: `fwc import --from nft --live` (ufw and firewalld both program nftables/iptables-nft), then review the result".into(),
        }),
    }
}

/// An iptables PATH: a save file (IPv6 when named `*6*`/`*.v6` or saved by ip6tables-save), or
/// a directory with `rules.v4` and/or `rules.v6` (netfilter-persistent's /etc/iptables).
fn iptables_files(p: &Path) -> Result<Vec<(PathBuf, bool)>, ImportError> {
    if p.is_dir() {
        let v: Vec<(PathBuf, bool)> = [("rules.v4", false), ("rules.v6", true)].into_iter().map(|(n, v6)| (p.join(n), v6)).filter(|(f, _)| f.exists()).collect();
        if v.is_empty() {
            return Err(ImportError::Source { what: format!("{} holds neither rules.v4 nor rules.v6", p.display()), hint: "give the iptables-save file itself".into() });
        }
        return Ok(v);
    }
    let text = std::fs::read_to_string(p).map_err(|e| ImportError::Source { what: format!("cannot read {}: {e}", p.display()), hint: "give the output of iptables-save".into() })?;
    let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let v6 = text.lines().take(3).any(|l| l.contains("ip6tables-save")) || name.ends_with(".v6") || name.contains("ip6");
    Ok(vec![(p.to_path_buf(), v6)])
}

/// The evaluator's identity of each foreign rule (`FAMILY TABLE CHAIN handle N`) -> its origin.
fn identities(listing: &Value, origins: &translate::Origins) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    let mut index: std::collections::BTreeMap<(String, String, String), usize> = Default::default();
    for o in listing.get("nftables").and_then(Value::as_array).into_iter().flatten() {
        let Some(r) = o.get("rule") else { continue };
        let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        let key = (s("family"), s("table"), s("chain"));
        let i = index.entry(key.clone()).or_insert(0);
        if let (Some(h), Some(origin)) = (r.get("handle").and_then(Value::as_u64), origins.get(&(key.0.clone(), key.1.clone(), key.2.clone(), *i))) {
            out.insert(format!("{} {} {} handle {h}", key.0, key.1, key.2), origin.clone());
        }
        *i += 1;
    }
    out
}
