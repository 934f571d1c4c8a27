//! The nftables backend: `table inet fwc`, nothing else.
//!
//! - **prepare**: work out the change ([`diff`]): from the live table (a terse listing with
//!   handles) and the last applied `nftables.json` (given by [`Backend::set_base`]) to the next
//!   one, one batch that adds, deletes or replaces single rules by handle, adds and deletes set
//!   and map elements, and creates or deletes chains, sets and maps only when they change;
//!   unchanged rules keep their counters and their `limit` / `ct count` state. A **full
//!   replace** — `add table inet fwc; delete table inet fwc;` followed by every object of
//!   `nftables.json` — is used for the first apply, when the layout changes (a chain's hook,
//!   a set's type), when the diff does not apply cleanly to the live table (checked), or when
//!   the caller asks for it (set elements changed outside fwc: the diff does not list live
//!   elements). [`NftChange`] says which and why. A diff that only adds is checked with
//!   `nft -j -c -f` (the kernel validates it and aborts; nothing changes); a full replace and a
//!   diff deleting elements are not (the check costs as much as the commit: nft reads every
//!   element) — nftables commits first, so a batch the kernel rejects at commit left nothing
//!   live, and a rejected diff is replaced by the full replace at commit. The kernel's rendering of the new
//!   ruleset *without elements* is taken here too, by loading it into a private throwaway
//!   network namespace (`unshare -n`), so the diff and verify compare like with like.
//! - **commit**: `nft -j -f` the batch: one transaction, the kernel applies all of it or none.
//!   A full replace whose new table has dynamic sets (`timeout` flag) that exist live with the
//!   same declaration does not `delete table` but flushes/deletes every other live object, so
//!   those sets keep the elements other programs (fail2ban, CrowdSec) wrote, with their
//!   timeouts ([`NftBackend::preserving_tx`]); a diff never touches their elements. There is no
//!   instant where the table is missing or half built, and conntrack entries survive.
//! - **rollback**: if this backend committed, a diff from what was committed back to the
//!   previous `nftables.json` (rules the failed apply did not touch keep their state); a full
//!   replace only when no diff applies, and a delete when nothing was applied before;
//!   otherwise the live table is untouched already. (`fwc rollback` is an ordinary apply.)
//! - **stamp** ([`stamp`]): the kernel's nftables generation id at which the table was last
//!   proven equal to an applied `nftables.json` (a full observation, or a verified commit that
//!   was the only transaction since the previous proof). While it holds, the plan takes a
//!   terse listing instead of listing and rendering every set element.
//! - **observe**: `nft -j list table inet fwc`, normalised (no handles, counter values, set
//!   element order, dynamic set contents) and compared with the expected rendering; drift is
//!   reported per rule using the `fwc:<kind>:<name>` comments the emitter puts on rules. The
//!   observe that verifies a commit lists tersely (`nft -t list ruleset`: chains, rules, set and
//!   map declarations, no elements): the elements went in with the same atomic transaction,
//!   and listing 100,000 of them costs more than the commit. Every later observe (`fwc status`,
//!   `fwc plan`, the agent's drift check) compares elements too; when it finds elements
//!   changed outside fwc, the next prepare of the same backend replaces the table whole.
//!
//! With `netns: Some(NS)` every nft command runs as `ip netns exec NS nft …` (tests, demos).
//! Test hook: `FWC_TEST_FAIL=prepare:nftables` makes the prepare batch contain a rule for a
//! missing chain (nft rejects it); `FWC_TEST_FAIL=commit:nftables` makes the commit batch end
//! with `create table inet fwc` (the kernel rejects it with EEXIST after everything else was
//! queued, so the whole batch is aborted). Both are real nft failures.
//! `FWC_NFT_BATCH_LOG=FILE` appends every committed batch to FILE (one JSON line each; tests).

mod diff;
pub mod lazy;
mod stamp;

pub use diff::{ElementCount, NftChange, NftMode};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

use fwc_compiler::artifacts::{sha256_hex, Artifacts, BackendKind, NftDoc, NFT_TABLE};
use miette::{miette, IntoDiagnostic, Result, WrapErr};
use serde_json::{json, Value};

use super::{Backend, Observation, RuleCounter};

/// `FWC_TEST_FAIL=phase:backend[,phase:backend…]`: is a failure injected here?
pub fn injected_failure(phase: &str, kind: BackendKind) -> bool {
    std::env::var("FWC_TEST_FAIL")
        .map(|v| v.split(',').any(|item| item.trim() == format!("{phase}:{}", kind.as_str())))
        .unwrap_or(false)
}

/// `FWC_TEST_FAIL=…,stall:phase` (for the agent's stop-grace test): how long that phase of
/// the transaction is held up before it runs — 30 s when injected, otherwise none.
pub fn injected_stall(phase: &str) -> std::time::Duration {
    let on = std::env::var("FWC_TEST_FAIL").is_ok_and(|v| v.split(',').any(|item| item.trim() == format!("stall:{phase}")));
    std::time::Duration::from_secs(if on { 30 } else { 0 })
}

#[derive(Debug, Clone)]
struct Staged {
    tx: Value,
    /// Dynamic sets of the new table: name -> declaration (see [`dynamic_sets`]).
    dynamic: Vec<(String, Value)>,
    /// What the batch does; a full replace may become [`NftBackend::preserving_tx`] at commit.
    change: NftChange,
    /// A diff not checked with `nft -c` (it deletes elements, and nft 1.0.6 then reads every
    /// interval set back, once for the check and once for the commit): the full replace the
    /// commit falls back to when the kernel rejects the diff: the new document, whose full
    /// replace batch is built only then (a million elements are not copied for nothing).
    unchecked_fallback: Option<NftDoc>,
    /// sha256 of the new nftables.json ([`digest`]).
    digest: String,
}

/// fwc's nftables table, optionally inside a named network namespace.
#[derive(Debug)]
pub struct NftBackend {
    /// Run nft inside this network namespace (`ip netns exec NAME nft …`).
    pub netns: Option<String>,
    /// The nft binary (default `nft`).
    pub nft: String,
    staged: Option<Staged>,
    /// quota (issue #26): the quotas of the ruleset being applied (from its manifest), whose
    /// objects get their `used` restored when a batch (re)creates them ([`crate::quota`]).
    quota_policies: Vec<fwc_artifacts::quota::QuotaPolicy>,
    committed: bool,
    /// Set by commit: the next observe is the apply's verify, which compares without set
    /// elements (see the module doc).
    verify_pending: bool,
    /// The nftables.json last applied (see [`Backend::set_base`]); the diff's starting point.
    base: Option<NftDoc>,
    /// Replace the table whole at the next prepare, for this reason (the caller's, or an
    /// observe that found set elements changed outside fwc).
    full_replace: Option<String>,
    /// sha256 of the nftables.json last applied ([`digest`]).
    base_digest: Option<String>,
    /// Set by commit when the committed transaction was the only one since the table was
    /// known equal to the base (or it replaced the table whole): the token to record once
    /// verify finds the table in sync (see [`stamp`]), and the new digest.
    stamp_pending: Option<(stamp::Token, String)>,
    /// Kernel renderings of nftables.json documents, by sha256 of their text.
    canonical: HashMap<String, Value>,
    /// Where renderings are also cached on disk (`<state dir>/cache`), so `fwc status` and
    /// `fwc plan` need not render the applied ruleset again.
    pub cache_dir: Option<PathBuf>,
}

/// A scratch-namespace rendering in progress.
struct Render {
    key: String,
    child: std::process::Child,
    _file: tempfile::NamedTempFile,
}

impl NftBackend {
    pub fn new(netns: Option<String>) -> NftBackend {
        NftBackend {
            netns,
            nft: "nft".into(),
            staged: None,
            quota_policies: Vec::new(),
            committed: false,
            verify_pending: false,
            base: None,
            full_replace: None,
            base_digest: None,
            stamp_pending: None,
            canonical: HashMap::new(),
            cache_dir: None,
        }
    }

    /// Cache kernel renderings in `dir` (created when needed).
    pub fn with_cache_dir(mut self, dir: impl Into<PathBuf>) -> NftBackend {
        self.cache_dir = Some(dir.into());
        self
    }

    pub(crate) fn command(&self) -> Command {
        let mut c = self.command_in_netns();
        // nft prints `meta hour` in its own local time zone; fwc loads seconds since UTC
        // midnight and compares listings, so every nft it runs reads and prints UTC (schedules).
        c.env("TZ", "UTC");
        c
    }

    fn command_in_netns(&self) -> Command {
        match &self.netns {
            // nft is a process that must run in the namespace: `ip netns exec` is the standard
            // way to start one there, the very command `--netns` is documented as (operators
            // can repeat it by hand), and it reports a missing namespace in iproute2's words.
            // fwc's own queries (links, qdiscs, filters, sysctls) use setns threads instead.
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, &self.nft]);
                c
            }
            None => Command::new(&self.nft),
        }
    }

    fn where_(&self) -> String {
        match &self.netns {
            Some(ns) => format!(" (netns {ns})"),
            None => String::new(),
        }
    }

    /// Run `nft -j [-c] -f FILE` on a transaction document.
    fn run_file(&self, doc: &Value, check: bool) -> Result<()> {
        let mut tmp = tempfile::Builder::new().prefix("fwc-nft-").suffix(".json").tempfile().into_diagnostic()?;
        // One write, not one per JSON token (a 10k-forward ruleset is megabytes).
        tmp.write_all(&serde_json::to_vec(doc).into_diagnostic()?).into_diagnostic()?;
        tmp.flush().into_diagnostic()?;
        let mut c = self.command();
        c.arg("-j");
        if check {
            c.arg("-c");
        }
        c.arg("-f").arg(tmp.path());
        let out = c.output().into_diagnostic().wrap_err("cannot run nft (is nftables installed?)")?;
        if !out.status.success() {
            return Err(miette!(
                "nft {}rejected the transaction{}: {}",
                if check { "-c " } else { "" },
                self.where_(),
                clean_nft_error(&String::from_utf8_lossy(&out.stderr))
            ));
        }
        Ok(())
    }

    /// The live `table inet fwc` as nft lists it (JSON), or None when it does not exist.
    pub fn list_table(&self) -> Result<Option<Value>> {
        let out = self
            .command()
            .args(["-j", "list", "table", "inet", NFT_TABLE])
            .output()
            .into_diagnostic()
            .wrap_err("cannot run nft (is nftables installed?)")?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            if err.contains("No such file or directory") {
                return Ok(None);
            }
            return Err(miette!("nft list table inet {NFT_TABLE} failed{}: {}", self.where_(), clean_nft_error(&err)));
        }
        serde_json::from_slice(&out.stdout).map(Some).into_diagnostic().wrap_err("nft printed invalid JSON")
    }

    /// The live table without the elements of sets and maps, with handles, or None when it
    /// does not exist: `nft -t -j list ruleset` filtered to `table inet fwc`. (nft 1.0.6 reads
    /// every interval set's elements for `nft -t list table`, not for `list ruleset`: 10 ms
    /// instead of 0.6 s with a 100,000-element set.)
    pub fn list_terse(&self) -> Result<Option<Value>> {
        let all = self.list_ruleset_terse()?;
        let ours = |o: &Value| {
            let Some((kind, body)) = o.as_object().and_then(|m| m.iter().next()) else { return false };
            match kind.as_str() {
                "metainfo" => true,
                "table" => body["family"] == "inet" && body["name"] == NFT_TABLE,
                _ => body["family"] == "inet" && body["table"] == NFT_TABLE,
            }
        };
        let items: Vec<Value> = all["nftables"].as_array().into_iter().flatten().filter(|o| ours(o)).cloned().collect();
        if !items.iter().any(|o| o.get("table").is_some()) {
            return Ok(None);
        }
        Ok(Some(json!({"nftables": items})))
    }

    /// Every table of the namespace without set and map elements (`nft -t -j list ruleset`):
    /// fwc's and other programs' (read only, e.g. for the ports Docker publishes).
    pub fn list_ruleset_terse(&self) -> Result<Value> {
        let out = self
            .command()
            .args(["-t", "-j", "list", "ruleset"])
            .output()
            .into_diagnostic()
            .wrap_err("cannot run nft (is nftables installed?)")?;
        if !out.status.success() {
            return Err(miette!("nft list ruleset failed{}: {}", self.where_(), clean_nft_error(&String::from_utf8_lossy(&out.stderr))));
        }
        serde_json::from_slice(&out.stdout).into_diagnostic().wrap_err("nft printed invalid JSON")
    }

    /// The live table in nft's text syntax with handles (`nft -a list table inet fwc`).
    pub fn list_table_text(&self) -> Option<String> {
        let out = self.command().args(["-a", "list", "table", "inet", NFT_TABLE]).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The transaction that replaces everything of fwc's table EXCEPT the dynamic sets that
    /// live with the same declaration (type, flags, timeout, size) as in `sets`: their
    /// elements, written by other programs with their own timeouts, stay untouched (no
    /// re-add, no rounding of timeouts, no window without them). Instead of `delete table`
    /// it flushes and deletes every live chain and deletes every other live object (from a
    /// terse listing, which has no elements), then adds the new table's objects, minus the
    /// kept sets. `Ok(None)`: nothing to keep (no dynamic set, first apply, or every dynamic
    /// set's declaration changed: those start empty); the caller replaces the whole table.
    fn preserving_tx(&self, replace: &Value, sets: &[(String, Value)]) -> Result<Option<Value>> {
        if sets.is_empty() {
            return Ok(None);
        }
        let Some(live) = self.list_terse()? else { return Ok(None) };
        let objects: Vec<(&String, &Value)> = live["nftables"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|o| o.as_object()?.iter().next())
            .filter(|(kind, _)| *kind != "metainfo" && *kind != "table" && *kind != "rule")
            .collect();
        let keep: Vec<&str> = sets
            .iter()
            .filter(|(name, want)| {
                let same = objects.iter().any(|(k, o)| *k == "set" && o["name"] == name.as_str() && declaration(o) == declaration(want));
                if !same && objects.iter().any(|(k, o)| *k == "set" && o["name"] == name.as_str()) {
                    tracing::warn!(set = %name, "dynamic set declaration changed: it starts empty");
                }
                same
            })
            .map(|(n, _)| n.as_str())
            .collect();
        if keep.is_empty() {
            return Ok(None);
        }
        let id = |kind: &str, o: &Value| json!({kind: {"family": "inet", "table": NFT_TABLE, "name": o["name"].clone()}});
        let mut tx = vec![add_table()];
        for (_, o) in objects.iter().filter(|(k, _)| *k == "chain") {
            tx.push(json!({"flush": id("chain", o)}));
        }
        for (kind, o) in &objects {
            if *kind == "set" && keep.contains(&o["name"].as_str().unwrap_or_default()) {
                continue;
            }
            tx.push(json!({"delete": id(kind, o)}));
        }
        // The new table's objects (after `add table; delete table`), minus the kept sets.
        let kept = |o: &Value| {
            o.get("add").and_then(|a| a.get("set")).and_then(|s| s["name"].as_str()).is_some_and(|n| keep.contains(&n))
        };
        tx.extend(replace["nftables"].as_array().into_iter().flatten().skip(2).filter(|o| !kept(o)).cloned());
        Ok(Some(json!({"nftables": tx})))
    }

    /// Replace the table with `nftables` (a complete `{"nftables": [...]}` document) atomically.
    pub fn load(&self, nftables: &Value) -> Result<()> {
        self.run_file(&replace_tx(nftables)?, false)
    }

    /// Delete fwc's table if it exists (atomic; no error when absent).
    pub fn delete_table(&self) -> Result<()> {
        self.run_file(&json!({"nftables": [add_table(), delete_table()]}), false)
    }

    /// sha256 over the normalised live table ("absent" when there is none): what a saved plan
    /// records, so `fwc apply plan.json` can refuse when the live state changed since.
    pub fn live_hash(&self) -> Result<String> {
        Ok(hash_of_listing(self.list_table()?.as_ref()))
    }

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
        let key = sha256_hex(format!("{}\n{}", self.nft, serde_json::to_string(nftables).unwrap()).as_bytes());
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
            .args(["-n", "sh", "-c", "\"$1\" -j -f \"$2\" && \"$1\" -j list table inet fwc", "sh", &self.nft])
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

    /// Compare the live table with the expected `nftables.json`.
    pub fn drift(&mut self, expected: &NftDoc) -> Result<Observation> {
        let live = self.list_table()?;
        self.drift_of(expected, live.as_ref())
    }

    /// [`Self::drift`] against a listing already taken (`list_table`), so a caller that also
    /// needs [`hash_of_listing`] lists a large table once.
    pub fn drift_of(&mut self, expected: &NftDoc, live: Option<&Value>) -> Result<Observation> {
        self.compare(expected, live, false)
    }

    /// Compare `live` with the kernel's rendering of `expected`; `terse`: `live` was listed
    /// without set elements, so they are left out of the comparison.
    fn compare(&mut self, expected: &NftDoc, live: Option<&Value>, terse: bool) -> Result<Observation> {
        // A big set's hash sets (issue #27) are left out of the scratch-namespace rendering
        // (a million elements loaded and listed back on every plan after a change): the
        // kernel lists their elements as emitted, so they are compared as text. Terse: the
        // skeleton (no element is compared).
        let (want, hashed) = if terse {
            (self.canonical(&structure(&lazy::skeleton(expected)))?, Vec::new())
        } else {
            let (doc, hashed) = split_hash_elements(expected);
            (self.canonical(&doc)?, hashed)
        };
        let want_empty = is_empty_doc(&lazy::skeleton(expected))?;
        let mut obs = Observation::default();
        match live {
            None if want_empty => {}
            None => obs.drift.push(format!("table inet {NFT_TABLE} is missing (deleted outside fwc?)")),
            Some(live) => {
                if want_empty {
                    obs.drift.push(format!("table inet {NFT_TABLE} exists but fwc has nothing applied"));
                } else {
                    let (mut want, mut live) = (normalize_with(&want, !terse), normalize_with(&live, !terse));
                    for (name, mut elems) in hashed {
                        if let Some(Value::Object(b)) = want.objects.get_mut(&("set".to_string(), name)) {
                            if !elems.is_empty() {
                                elems.sort_unstable_by(element_order);
                                b.insert("elem".into(), Value::Array(elems));
                            }
                        }
                    }
                    accept_health_rewrites(&want, &mut live);
                    accept_dns_installs(&want, &mut live);
                    // The text listing (rules in nft syntax for the report) is a second full
                    // listing: taken only when there is drift to describe.
                    let plain = describe_drift(&want, &live, None);
                    if plain.is_empty() {
                        obs.drift = vec![];
                    } else {
                        // The text listing only renders changed rules: with the rules as
                        // applied (drift in set elements: a second listing of a big set costs
                        // as much as the first, 20 s at 1M), the plain description is complete.
                        obs.drift = if want.rules == live.rules {
                            plain
                        } else {
                            let text = self.list_table_text();
                            describe_drift(&want, &live, text.as_deref())
                        };
                        // The diff assumes the live elements are the applied ones: when they
                        // are not, the next apply of this backend replaces the table whole.
                        if let Some(set) = elements_drifted(&want, &live) {
                            // Naming the elements (issue #27), from the drift description.
                            let what = obs.drift.iter().find_map(|d| d.strip_prefix(&format!("{set}: ")));
                            self.full_replace = Some(match what {
                                Some(w) => format!("the elements of {set} were changed outside fwc ({w})"),
                                None => format!("the elements of {set} were changed outside fwc"),
                            });
                        }
                    }
                }
                obs.counters = counters(&live);
                if !terse {
                    obs.per_source = super::persource::fill(&live);
                }
            }
        }
        Ok(obs)
    }
}

/// What `fwc plan` (and so `fwc apply`) needs of the live table.
pub struct LiveView {
    /// The live table: a full listing, or a terse one (no elements) when the table is known
    /// unchanged since it was last seen in sync ([`stamp`]); None: there is none.
    pub listing: Option<Value>,
    /// sha256 over the live state (what a saved plan records); the same whichever listing.
    pub hash: String,
    /// Differences from the applied nftables.json.
    pub drift: Vec<String>,
    /// Packet and byte counters of fwc's rules, from the listing.
    pub counters: Vec<RuleCounter>,
}

/// sha256 of an artifact set's nftables.json: the manifest's digest (checked when a generation
/// is read from the state dir), else computed.
pub fn digest(a: &Artifacts) -> String {
    a.manifest
        .artifact_hashes
        .get(fwc_compiler::artifacts::NFTABLES_FILE)
        .cloned()
        .unwrap_or_else(|| sha256_hex(&serde_json::to_vec(&a.nftables).unwrap_or_default()))
}

impl NftBackend {
    /// The live table against `applied` (None: nothing applied). When the kernel's nftables
    /// generation is the one at which the table was last proven equal to `applied` (no
    /// transaction since, by anyone: [`stamp`]), only a terse listing is taken (no elements,
    /// no rendering); otherwise the full listing is compared and, when equal, the stamp is
    /// recorded for the next time.
    pub fn observe_applied(&mut self, applied: Option<&Artifacts>) -> Result<LiveView> {
        let in_sync_hash = |terse: Option<&Value>, d: &str| sha256_hex(format!("in-sync {d} {}", hash_of_listing(terse)).as_bytes());
        let token = match (&self.cache_dir, applied) {
            (Some(_), Some(_)) => stamp::token(self.netns.as_deref()).ok(),
            _ => None,
        };
        let (Some(a), Some(t)) = (applied, token) else {
            let live = self.list_table()?;
            let drift = match applied {
                Some(a) => self.drift_of(&a.nftables, live.as_ref())?.drift,
                None if live.is_some() => vec!["table inet fwc exists but fwc has no applied state here (it will be replaced)".into()],
                None => vec![],
            };
            return Ok(LiveView { hash: hash_of_listing(live.as_ref()), counters: live.as_ref().map(counters).unwrap_or_default(), listing: live, drift });
        };
        let dir = self.cache_dir.clone().expect("checked above");
        let d = digest(a);
        if stamp::in_sync(&dir, &t, &d) {
            let terse = self.list_terse()?;
            if terse.is_some() {
                return Ok(LiveView { hash: in_sync_hash(terse.as_ref(), &d), counters: terse.as_ref().map(counters).unwrap_or_default(), listing: terse, drift: vec![] });
            }
        }
        let live = self.list_table()?;
        let drift = self.drift_of(&a.nftables, live.as_ref())?.drift;
        if !drift.is_empty() || live.is_none() || is_empty_doc(&a.nftables)? {
            return Ok(LiveView { hash: hash_of_listing(live.as_ref()), counters: live.as_ref().map(counters).unwrap_or_default(), listing: live, drift });
        }
        let terse = self.list_terse()?;
        if stamp::token(self.netns.as_deref()).ok().as_ref() == Some(&t) {
            stamp::record(&dir, &t, &d);
        }
        Ok(LiveView { hash: in_sync_hash(terse.as_ref(), &d), counters: live.as_ref().map(counters).unwrap_or_default(), listing: live, drift })
    }

    /// Why the next prepare replaces the table whole, when an observe found set elements
    /// changed outside fwc (or the caller asked for it).
    pub fn full_replace_pending(&self) -> Option<&str> {
        self.full_replace.as_deref()
    }

    /// What applying `next` over the live table changes, and the batch that does it: a diff
    /// from `base` (the nftables.json last applied) when the live table allows one, else a
    /// full replace with the reason. `live`: a terse listing ([`Self::list_terse`]) or a full one.
    ///
    /// When both documents are held as the compiler's text, their element lists are compared
    /// as text and only the elements around a difference are parsed ([`lazy::reduced_pair`]):
    /// the batch is the same as from the whole documents, at the cost of the change.
    pub fn change(&mut self, base: Option<&NftDoc>, next: &NftDoc, live: Option<&Value>, full_replace: Option<&str>) -> Result<(NftChange, Value)> {
        match self.diff_or_reason(base, next, live, full_replace)? {
            Ok(d) => Ok(d),
            Err(reason) => Ok((NftChange::full(reason), replace_tx(next.value())?)),
        }
    }

    /// [`Self::change`] without building a full replace's batch (the plan shows the change; a
    /// million-element table is not copied into a batch that is thrown away).
    pub fn planned_change(&mut self, base: Option<&NftDoc>, next: &NftDoc, live: Option<&Value>, full_replace: Option<&str>) -> Result<NftChange> {
        Ok(match self.diff_or_reason(base, next, live, full_replace)? {
            Ok((c, _)) => c,
            Err(reason) => NftChange::full(reason),
        })
    }

    /// The diff, or why the table is replaced whole (`Err`).
    fn diff_or_reason(
        &mut self,
        base: Option<&NftDoc>,
        next: &NftDoc,
        live: Option<&Value>,
        full_replace: Option<&str>,
    ) -> Result<std::result::Result<(NftChange, Value), String>> {
        let full = |reason: &str| Ok(Err(reason.to_string()));
        let next_skel = lazy::skeleton(next);
        if is_empty_doc(&next_skel)? {
            return Ok(Ok((NftChange::full("nothing to apply: the table is deleted"), json!({"nftables": [add_table(), delete_table()]}))));
        }
        let Some(live) = live else { return full("first apply (table inet fwc does not exist)") };
        let Some(base) = base else { return full("fwc has not applied anything here before") };
        if let Some(reason) = full_replace {
            return full(reason);
        }
        if is_empty_doc(&lazy::skeleton(base))? {
            return full("fwc has not applied anything here before");
        }
        let canon = self.canonical(&structure(&next_skel))?;
        // A set the live table lacks is created with every element: its lists stay whole.
        let live_sets: HashSet<(&str, &str)> = live["nftables"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|o| o.as_object()?.iter().next())
            .filter_map(|(k, b)| Some((k.as_str(), b.get("name")?.as_str()?)))
            .collect();
        let reduced = lazy::reduced_pair(base, next, |kind, name| !live_sets.contains(&(kind, name)));
        Ok(match &reduced {
            Some((b, n)) => diff::diff(b, n, &canon, live),
            None => diff::diff(base.value(), next.value(), &canon, live),
        })
    }

    /// quota (issue #26): restore the usage of every quota object `tx` (re)creates, from the
    /// live count or the ledger in the state dir (`<state dir>/cache`'s parent); see
    /// [`crate::quota::restore_used`]. Costs one `nft list quotas` when `tx` adds a quota.
    fn restore_quotas(&self, tx: &mut Value, policies: &[fwc_artifacts::quota::QuotaPolicy]) {
        let adds_quota = tx["nftables"].as_array().is_some_and(|b| b.iter().any(|c| c.get("add").and_then(|a| a.get("quota")).is_some()));
        if policies.is_empty() || !adds_quota {
            return;
        }
        let live = crate::quota::kernel::live_usage(self).unwrap_or_else(|e| {
            tracing::warn!("quota: cannot read the live counts ({e}); restoring from the ledger");
            Default::default()
        });
        let state_dir = self.cache_dir.as_deref().and_then(std::path::Path::parent);
        crate::quota::restore_used(tx, &live, state_dir, policies, crate::quota::now());
    }

    /// Append a committed batch to `FWC_NFT_BATCH_LOG` (tests inspect what was sent).
    fn log_batch(tx: &Value) {
        if let Ok(path) = std::env::var("FWC_NFT_BATCH_LOG") {
            if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
                let _ = writeln!(f, "{tx}");
            }
        }
    }
}

impl Backend for NftBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Nftables
    }

    fn set_base(&mut self, previous: Option<&Artifacts>, full_replace: Option<&str>) {
        self.base = previous.map(|p| p.nftables.clone());
        self.base_digest = previous.map(digest);
        if let Some(r) = full_replace {
            self.full_replace = Some(r.to_string());
        }
    }

    fn prepare(&mut self, next: &Artifacts) -> miette::Result<()> {
        self.quota_policies = next.manifest.setup.quotas.clone();
        self.committed = false;
        self.verify_pending = false;
        let live = self.list_terse().wrap_err("nftables: prepare failed")?;
        let full_replace = self.full_replace.take();
        let base = self.base.take();
        let (mut change, mut tx) =
            self.change(base.as_ref(), &next.nftables, live.as_ref(), full_replace.as_deref()).wrap_err("nftables: prepare failed")?;
        if injected_failure("prepare", BackendKind::Nftables) {
            tx["nftables"].as_array_mut().unwrap().push(json!({"add": {"rule": {
                "family": "inet", "table": NFT_TABLE, "chain": "fwc-test-injected-missing-chain",
                "expr": [{"accept": null}]}}}));
        }
        let deletes_elements =
            tx["nftables"].as_array().is_some_and(|b| b.iter().any(|c| c.get("delete").and_then(|d| d.get("element")).is_some()));
        // `nft -j -c` costs as much as the commit itself where it has to read every element
        // (a whole table; a diff deleting elements: nft 1.0.6 reads every interval set back).
        // Those are not checked here: nftables commits first, so when the kernel rejects the
        // batch at commit nothing of this apply is live yet, and a rejected diff falls back to
        // the full replace there. (An injected prepare failure is always checked.)
        let injected = injected_failure("prepare", BackendKind::Nftables);
        let mut unchecked_fallback = None;
        let mut checked = match change.mode {
            NftMode::FullReplace if !injected => Ok(()),
            NftMode::Diff if deletes_elements && !injected => {
                unchecked_fallback = Some(next.nftables.clone());
                Ok(())
            }
            _ => self.run_file(&tx, true),
        };
        if let (Err(e), NftMode::Diff | NftMode::Unchanged) = (&checked, change.mode) {
            // The live table is not what the last apply left (a killed apply, hand edits of
            // set elements): replace it whole instead.
            let reason = format!("the diff does not apply to the live table ({})", e.to_string().lines().last().unwrap_or("").trim());
            tracing::warn!("nftables: {reason}; replacing the table whole");
            change = NftChange::full(reason);
            tx = replace_tx(&next.nftables)?;
            if injected_failure("prepare", BackendKind::Nftables) {
                tx["nftables"].as_array_mut().unwrap().push(json!({"add": {"rule": {
                    "family": "inet", "table": NFT_TABLE, "chain": "fwc-test-injected-missing-chain",
                    "expr": [{"accept": null}]}}}));
            }
            checked = if injected { self.run_file(&tx, true) } else { Ok(()) };
        }
        if let Err(e) = checked {
            self.base = base;
            return Err(e.wrap_err("nftables: prepare (nft -j -c) failed"));
        }
        // The kernel's rendering of the new ruleset without elements, for verify (cached).
        let skel = lazy::skeleton(&next.nftables);
        self.canonical(&structure(&skel)).wrap_err("nftables: prepare failed")?;
        tracing::info!(mode = ?change.mode, "nftables: {}", change.describe());
        let dynamic = dynamic_sets(&skel);
        self.staged = Some(Staged { tx, dynamic, change, unchecked_fallback, digest: digest(next) });
        Ok(())
    }

    fn commit(&mut self) -> miette::Result<()> {
        let mut staged = self.staged.take().ok_or_else(|| miette!("nftables: commit without prepare"))?;
        // A full replace keeps dynamic sets that exist unchanged in place with their elements
        // (see `preserving_tx`); a diff never touches them.
        let preserving = match staged.change.mode {
            NftMode::FullReplace => self.preserving_tx(&staged.tx, &staged.dynamic),
            _ => Ok(None),
        };
        let len = staged.tx["nftables"].as_array().map_or(0, Vec::len);
        let mut owned;
        let tx = match preserving {
            Ok(Some(tx)) => {
                owned = tx;
                &mut owned
            }
            Ok(None) => &mut staged.tx,
            Err(e) => {
                self.staged = Some(staged);
                return Err(e.wrap_err("nftables: commit failed"));
            }
        };
        if injected_failure("commit", BackendKind::Nftables) {
            tx["nftables"].as_array_mut().unwrap().push(json!({"create": {"table": {"family": "inet", "name": NFT_TABLE}}}));
        }
        // The generation before: when it is the one the table was last proven equal to the base
        // at, and the commit below is the only transaction in between, verify can record that
        // the table now equals the new nftables.json (see `stamp`).
        let before = self.cache_dir.as_ref().and_then(|_| stamp::token(self.netns.as_deref()).ok());
        let known = match (&before, &self.cache_dir, &self.base_digest) {
            _ if staged.change.mode == NftMode::FullReplace => true,
            (Some(t), Some(dir), Some(d)) => stamp::in_sync(dir, t, d),
            _ => false,
        };
        if let Some(dir) = &self.cache_dir {
            stamp::forget(dir);
        }
        let policies = std::mem::take(&mut self.quota_policies);
        self.restore_quotas(tx, &policies);
        Self::log_batch(tx);
        let mut result = if tx["nftables"].as_array().is_some_and(Vec::is_empty) { Ok(()) } else { self.run_file(tx, false) };
        if let (Err(e), Some(doc)) = (&result, &staged.unchecked_fallback) {
            // The unchecked diff does not apply to the live table (nothing changed: the kernel
            // aborted it): replace the table whole, as prepare does for a checked diff.
            tracing::warn!("nftables: the diff does not apply to the live table ({e}); replacing the table whole");
            result = replace_tx(doc.value()).and_then(|mut full| {
                self.restore_quotas(&mut full, &policies);
                if injected_failure("commit", BackendKind::Nftables) {
                    full["nftables"].as_array_mut().unwrap().push(json!({"create": {"table": {"family": "inet", "name": NFT_TABLE}}}));
                }
                Self::log_batch(&full);
                self.run_file(&full, false)
            });
            staged.change = NftChange::full("the diff does not apply to the live table");
        }
        let after = before.as_ref().and_then(|_| stamp::token(self.netns.as_deref()).ok());
        self.stamp_pending = match (before, after) {
            (Some(b), Some(a)) if known && result.is_ok() && a == b.next() => Some((a, staged.digest.clone())),
            _ => None,
        };
        staged.tx["nftables"].as_array_mut().unwrap().truncate(len);
        self.staged = Some(staged);
        result.wrap_err("nftables: commit (nft -j -f) failed; the kernel aborted the whole transaction")?;
        tracing::debug!("nftables committed");
        self.committed = true;
        self.verify_pending = true;
        Ok(())
    }

    fn rollback(&mut self, previous: Option<&Artifacts>) -> miette::Result<()> {
        self.verify_pending = false;
        if !self.committed {
            // Nothing of ours went live: the previous table is still in place, untouched.
            self.staged = None;
            return Ok(());
        }
        self.staged = None;
        match previous {
            Some(p) if !is_empty_doc(&p.nftables)? => {
                // A full replace (keeping what fail2ban & co. added meanwhile, as commit does):
                // this rollback only follows a failed verify or a later backend's failure, and
                // keeping a copy of every committed element to diff back from would cost every
                // apply. (`fwc rollback` is an ordinary transaction: a diff.)
                let mut tx = replace_tx(&p.nftables)?;
                self.restore_quotas(&mut tx, &p.manifest.setup.quotas);
                match self.preserving_tx(&tx, &dynamic_sets(&p.nftables))? {
                    Some(keep) => self.run_file(&keep, false),
                    None => self.run_file(&tx, false),
                }
            }
            _ => self.delete_table(),
        }
        .wrap_err("nftables: rollback failed")?;
        self.committed = false;
        Ok(())
    }

    fn rollback_from(&mut self, previous: Option<&Artifacts>, committed: &Artifacts) -> miette::Result<()> {
        if !self.committed {
            return self.rollback(previous);
        }
        // The way back as a diff from what was committed: the rules the failed apply did not
        // touch keep their counters and `limit` / `ct count` state through the rollback too.
        let back = previous.map(|p| &p.nftables).filter(|d| !is_empty_doc(&lazy::skeleton(d)).unwrap_or(true));
        if let Some(prev) = back {
            let attempt = (|| -> Result<bool> {
                let live = self.list_terse()?;
                let (change, mut tx) = self.change(Some(&committed.nftables), prev, live.as_ref(), None)?;
                if change.mode != NftMode::Diff && change.mode != NftMode::Unchanged {
                    return Ok(false);
                }
                self.restore_quotas(&mut tx, &previous.map(|p| p.manifest.setup.quotas.clone()).unwrap_or_default());
                tracing::info!("nftables: rollback: {}", change.describe());
                Self::log_batch(&tx);
                if !tx["nftables"].as_array().is_some_and(Vec::is_empty) {
                    self.run_file(&tx, false)?;
                }
                Ok(true)
            })();
            match attempt {
                Ok(true) => {
                    self.verify_pending = false;
                    self.staged = None;
                    self.committed = false;
                    return Ok(());
                }
                Ok(false) => {}
                Err(e) => tracing::warn!("nftables: the rollback diff failed ({e}); replacing the table whole"),
            }
        }
        self.rollback(previous)
    }

    fn observe(&mut self, expected: &Artifacts) -> miette::Result<Observation> {
        if std::mem::take(&mut self.verify_pending) {
            let live = self.list_terse()?;
            // Terse: elements are not compared, so the document's skeleton is enough.
            let obs = self.compare(&expected.nftables, live.as_ref(), true)?;
            if let (true, Some((t, d)), Some(dir)) = (obs.in_sync(), self.stamp_pending.take(), &self.cache_dir) {
                stamp::record(dir, &t, &d);
            }
            return Ok(obs);
        }
        self.drift(&expected.nftables)
    }
}

/// `doc` without the elements of its plain hash address sets (no flags, every element an
/// address: a big set's sets per prefix length), and those elements by set name. From the
/// document's text where it is held: only the element lists go through the JSON parser, not
/// into a whole tree that is copied.
fn split_hash_elements(doc: &NftDoc) -> (Value, Vec<(String, Vec<Value>)>) {
    if let Some((text, split)) = lazy::split_doc(doc) {
        let mut out = split.skeleton.clone();
        let mut taken = Vec::new();
        for r in &split.raw {
            let Some(elems) = lazy::parse_elements(&text[r.range.clone()]) else { return split_hash_elements_of(doc.value()) };
            let Some(body) = lazy::body_mut(&mut out, r) else { return split_hash_elements_of(doc.value()) };
            let plain = r.kind == "set"
                && body.get("flags").is_none()
                && matches!(body.get("type").and_then(Value::as_str), Some("ipv4_addr" | "ipv6_addr"))
                && elems.iter().all(Value::is_string);
            if plain {
                taken.push((r.name.clone(), elems));
            } else {
                body.insert("elem".into(), Value::Array(elems));
            }
        }
        return (out, taken);
    }
    split_hash_elements_of(doc.value())
}

fn split_hash_elements_of(doc: &Value) -> (Value, Vec<(String, Vec<Value>)>) {
    let mut out = doc.clone();
    let mut taken = Vec::new();
    for cmd in out.get_mut("nftables").and_then(Value::as_array_mut).into_iter().flatten() {
        let set = match cmd {
            Value::Object(m) if m.contains_key("add") => m.get_mut("add").and_then(|a| a.get_mut("set")),
            Value::Object(m) => m.get_mut("set"),
            _ => None,
        };
        let Some(Value::Object(b)) = set else { continue };
        let plain = b.get("flags").is_none()
            && matches!(b.get("type").and_then(Value::as_str), Some("ipv4_addr" | "ipv6_addr"))
            && b.get("elem").and_then(Value::as_array).is_some_and(|e| e.iter().all(Value::is_string));
        if let (true, Some(name)) = (plain, b.get("name").and_then(Value::as_str).map(str::to_string)) {
            if let Some(Value::Array(e)) = b.remove("elem") {
                taken.push((name, e));
            }
        }
    }
    (out, taken)
}

/// `doc` without the elements of its sets and maps: what the diff and verify compare with
/// the live table (its kernel rendering is cheap and stays cached across element changes).
pub fn structure(doc: &Value) -> Value {
    fn without_elem(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, x)| match (k.as_str(), x) {
                        ("set" | "map", Value::Object(o)) => {
                            (k.clone(), Value::Object(o.iter().filter(|(f, _)| *f != "elem").map(|(f, y)| (f.clone(), y.clone())).collect()))
                        }
                        ("add", _) => (k.clone(), without_elem(x)),
                        _ => (k.clone(), x.clone()),
                    })
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    let items = doc.get("nftables").and_then(Value::as_array).map(|a| a.iter().map(without_elem).collect()).unwrap_or_default();
    json!({"nftables": Value::Array(items)})
}

/// The first fwc-owned set or map whose live elements differ from the expected ones.
fn elements_drifted(want: &Normalized, live: &Normalized) -> Option<String> {
    want.objects.iter().find_map(|((kind, name), w)| {
        let l = live.objects.get(&(kind.clone(), name.clone()))?;
        ((kind == "set" || kind == "map") && w.get("elem") != l.get("elem")).then(|| format!("{kind} {name}"))
    })
}

/// sha256 over a normalised listing ("absent" when there is no table): what a saved plan
/// records, so `fwc apply plan.json` can refuse when the live state changed since.
pub fn hash_of_listing(live: Option<&Value>) -> String {
    match live {
        // Streamed into the hash: a listing of a million elements is not built as text.
        Some(v) => fwc_compiler::artifacts::sha256_compact(&normalize(v)),
        None => sha256_hex(b"absent"),
    }
}

/// Keep the `keep` most recently written files of a cache dir.
fn gc_cache(dir: &std::path::Path, keep: usize) {
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

/// The dynamic sets of an `nftables.json` (name, declaration): sets with the `timeout` flag,
/// which the emitter gives exactly the `dynamic=#true` sets. Other programs own their
/// elements: drift ignores them ([`normalize`]) and an apply carries them over.
pub fn dynamic_sets(doc: &Value) -> Vec<(String, Value)> {
    let Some(arr) = doc.get("nftables").and_then(Value::as_array) else { return Vec::new() };
    arr.iter()
        .filter_map(|o| o.get("add").and_then(|a| a.get("set")).or_else(|| o.get("set")))
        .filter(|s| s["flags"].as_array().is_some_and(|f| f.iter().any(|x| x == "timeout")) || is_per_source_set(s))
        .filter_map(|s| Some((s["name"].as_str()?.to_string(), s.clone())))
        .collect()
}

/// A per-source limit's set (issue #26, `fwc_compiler::persource`): the kernel adds its
/// elements (the sources it sees), so they are neither drift nor dropped by an apply.
fn is_per_source_set(set: &Value) -> bool {
    set["name"].as_str().is_some_and(|n| fwc_compiler::persource::parse_set_name(n).is_some())
}

/// What must match for a dynamic set's elements to be carried over.
fn declaration(set: &Value) -> (Value, Vec<String>, Value, Value) {
    let mut flags: Vec<String> = set["flags"].as_array().into_iter().flatten().filter_map(|f| f.as_str().map(str::to_string)).collect();
    flags.sort();
    (set["type"].clone(), flags, set["timeout"].clone(), set["size"].clone())
}

fn add_table() -> Value {
    json!({"add": {"table": {"family": "inet", "name": NFT_TABLE}}})
}

fn delete_table() -> Value {
    json!({"delete": {"table": {"family": "inet", "name": NFT_TABLE}}})
}

/// Whether a `{"nftables": [...]}` document has no object (metainfo aside), without copying it.
fn is_empty_doc(doc: &Value) -> Result<bool> {
    let arr = doc
        .get("nftables")
        .and_then(Value::as_array)
        .ok_or_else(|| miette!("nftables.json is not a libnftables JSON document (no \"nftables\" array)"))?;
    Ok(arr.iter().all(|o| o.get("metainfo").is_some()))
}

/// The objects of a `{"nftables": [...]}` document, without metainfo.
fn items(doc: &Value) -> Result<Vec<Value>> {
    let arr = doc
        .get("nftables")
        .and_then(Value::as_array)
        .ok_or_else(|| miette!("nftables.json is not a libnftables JSON document (no \"nftables\" array)"))?;
    Ok(arr.iter().filter(|o| o.get("metainfo").is_none()).cloned().collect())
}

/// `add table; delete table; <doc>`: one batch that replaces fwc's table whether or not it exists.
/// Refuses documents that touch any other table.
pub fn replace_tx(doc: &Value) -> Result<Value> {
    let objs = items(doc)?;
    for o in &objs {
        if let Some(t) = foreign_table(o) {
            return Err(miette!("nftables.json touches table {t}; fwc only ever changes table inet {NFT_TABLE}"));
        }
    }
    let mut tx = vec![add_table(), delete_table()];
    tx.extend(objs);
    Ok(json!({"nftables": tx}))
}

/// If an object (possibly wrapped in add/create/insert/…) names a table other than inet fwc.
fn foreign_table(o: &Value) -> Option<String> {
    let Value::Object(m) = o else { return None };
    let (k, v) = m.iter().next()?;
    let inner = match k.as_str() {
        "add" | "create" | "insert" | "replace" | "delete" | "flush" | "destroy" => v.as_object()?.values().next()?,
        _ => v,
    };
    let (family, table) = if k == "table" || inner.get("table").is_none() {
        (inner.get("family")?.as_str()?, inner.get("name")?.as_str()?)
    } else {
        (inner.get("family")?.as_str()?, inner.get("table")?.as_str()?)
    };
    (family != "inet" || table != NFT_TABLE).then(|| format!("{family} {table}"))
}

fn clean_nft_error(stderr: &str) -> String {
    let s = stderr.trim();
    if s.is_empty() {
        "(no message)".into()
    } else {
        s.lines().filter(|l| !l.trim().is_empty()).take(12).collect::<Vec<_>>().join("\n  ")
    }
}

// ---------------------------------------------------------------------------------------------
// Normalisation and drift

/// A listing with volatile parts removed, keyed for comparison.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Normalized {
    /// ("chain"|"set"|"map"|"counter"|…, name) -> attributes.
    pub objects: BTreeMap<(String, String), Value>,
    /// chain -> rules in order.
    pub rules: BTreeMap<String, Vec<Value>>,
}

impl serde::Serialize for Normalized {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let objects: Vec<_> = self.objects.iter().map(|((k, n), v)| json!([k, n, v])).collect();
        json!({"objects": objects, "rules": self.rules}).serialize(s)
    }
}

/// Remove handles, counter values, quota usage, element expiry; sort set elements (except in
/// dynamic sets, whose contents the kernel fills at run time and which are ignored).
pub fn normalize(listing: &Value) -> Normalized {
    normalize_with(listing, true)
}

/// [`normalize`]; `elements: false` leaves the elements of sets and maps out (what a terse
/// listing, `nft -t`, does not show).
fn normalize_with(listing: &Value, elements: bool) -> Normalized {
    let mut n = Normalized::default();
    let Some(arr) = listing.get("nftables").and_then(Value::as_array) else { return n };
    for o in arr {
        let Value::Object(m) = o else { continue };
        let Some((kind, body)) = m.iter().next() else { continue };
        if kind == "metainfo" || kind == "table" {
            continue;
        }
        let mut body = match body {
            Value::Object(m) if !elements && (kind == "set" || kind == "map") => {
                Value::Object(m.iter().filter(|(k, _)| *k != "elem").map(|(k, v)| (k.clone(), v.clone())).collect())
            }
            _ => body.clone(),
        };
        strip_volatile(&mut body);
        if let Value::Object(b) = &mut body {
            if kind == "quota" {
                b.remove("used"); // quota (issue #26): the count is not drift
            }
            b.remove("handle");
            b.remove("family");
            b.remove("table");
            if kind == "set" || kind == "map" {
                let dynamic = b
                    .get("flags")
                    .and_then(Value::as_array)
                    .is_some_and(|f| f.iter().any(|x| x == "dynamic" || x == "timeout"));
                let per_source = b.get("name").and_then(Value::as_str).is_some_and(|n| fwc_compiler::persource::parse_set_name(n).is_some());
                if dynamic || per_source {
                    b.remove("elem");
                } else if let Some(Value::Array(elems)) = b.get_mut("elem") {
                    elems.sort_unstable_by(element_order);
                }
            }
        }
        if kind == "rule" {
            let chain = body.get("chain").and_then(Value::as_str).unwrap_or("").to_string();
            if let Value::Object(b) = &mut body {
                b.remove("chain");
            }
            n.rules.entry(chain).or_default().push(body);
        } else {
            let name = body.get("name").and_then(Value::as_str).unwrap_or("").to_string();
            n.objects.insert((kind.clone(), name), body);
        }
    }
    n
}

/// The order set elements are compared in (any total order does, the same on both sides):
/// strings (addresses, the elements of big sets) as text without allocating, the rest by
/// their JSON text.
fn element_order(a: &Value, b: &Value) -> std::cmp::Ordering {
    match (a, b) {
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::String(_), _) => std::cmp::Ordering::Less,
        (_, Value::String(_)) => std::cmp::Ordering::Greater,
        _ => a.to_string().cmp(&b.to_string()),
    }
}

/// The goto targets of a dispatch rule of a health-checked kernel forward
/// (`numgen inc mod N vmap { 0 : goto c0, … }`, its only statement), in slot order.
fn dispatch_targets(rule: &Value) -> Option<Vec<&str>> {
    let [stmt] = rule.get("expr")?.as_array()?.as_slice() else { return None };
    let vmap = stmt.get("vmap")?;
    vmap.pointer("/key/numgen")?;
    vmap.pointer("/data/set")?.as_array()?.iter().map(|e| e.pointer("/1/goto/target").and_then(Value::as_str)).collect()
}

/// The forwarder rewrites the dispatch chains of health-checked kernel forwards
/// (forwarder/src/kernel.rs): a live dispatch rule over a non-empty subsequence of the
/// expected targets, with the expected comment, is what fwc wrote, not drift.
fn accept_health_rewrites(want: &Normalized, live: &mut Normalized) {
    for (chain, w) in &want.rules {
        let [wr] = w.as_slice() else { continue };
        let Some(all) = dispatch_targets(wr) else { continue };
        let Some([lr]) = live.rules.get(chain).map(Vec::as_slice) else { continue };
        let Some(used) = dispatch_targets(lr) else { continue };
        let mut rest = all.iter();
        let subsequence = !used.is_empty() && used.iter().all(|u| rest.any(|a| a == u));
        if subsequence && lr.get("comment") == wr.get("comment") {
            live.rules.insert(chain.clone(), w.clone());
        }
    }
}

/// The forwarder fills the DNAT chain of a kernel forward to a DNS name
/// (forwarder/src/kernel_dns.rs), compiled empty: one live rule in an expected-empty
/// `fdn4_<rule>` / `fdn6_<rule>` chain, with that forward's comment, matching `meta l4proto`
/// and DNATing in the chain's family to an address or a `numgen` map of them, is what fwc
/// wrote, not drift. Anything else in such a chain is.
fn accept_dns_installs(want: &Normalized, live: &mut Normalized) {
    for (kind, chain) in want.objects.keys() {
        let fam = match chain.get(..5) {
            Some("fdn4_") => "ip",
            Some("fdn6_") => "ip6",
            _ => continue,
        };
        if kind != "chain" || want.rules.get(chain).is_some_and(|r| !r.is_empty()) {
            continue;
        }
        let Some([lr]) = live.rules.get(chain).map(Vec::as_slice) else { continue };
        let comment = fwc_compiler::artifacts::rule_comment(fwc_compiler::artifacts::RuleKind::Forward, &chain[5..]);
        let Some([m, nat]) = lr.get("expr").and_then(Value::as_array).map(Vec::as_slice) else { continue };
        let l4 = m.pointer("/match/left/meta/key") == Some(&json!("l4proto"));
        let dnat = nat.pointer("/dnat/family") == Some(&json!(fam))
            && nat.pointer("/dnat/addr").is_some_and(|a| a.is_string() || a.pointer("/map/key/numgen").is_some());
        if l4 && dnat && lr.get("comment") == Some(&json!(comment)) {
            live.rules.remove(chain);
            if let Some(w) = want.rules.get(chain) {
                live.rules.insert(chain.clone(), w.clone());
            }
        }
    }
}

fn strip_volatile(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.remove("handle");
            m.remove("expires");
            if let Some(c) = m.get_mut("counter") {
                if let Value::Object(cm) = c {
                    cm.remove("packets");
                    cm.remove("bytes");
                    if cm.is_empty() {
                        *c = Value::Null;
                    }
                }
            }
            if let Some(Value::Object(q)) = m.get_mut("quota") {
                q.remove("used");
            }
            for (_, x) in m.iter_mut() {
                strip_volatile(x);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(strip_volatile),
        _ => {}
    }
}

/// `fwc:filter:ssh` -> ("filter", "ssh") (the comment format's one parser is
/// [`fwc_compiler::artifacts::parse_rule_comment`]).
pub fn rule_label(rule: &Value) -> Option<(String, String)> {
    let (kind, name) = fwc_compiler::artifacts::parse_rule_comment(rule.get("comment")?.as_str()?)?;
    Some((kind.as_str().to_string(), name.to_string()))
}

fn label_text(rule: &Value) -> String {
    match rule_label(rule) {
        Some((k, n)) => format!("{k} \"{n}\""),
        None => "(rule without fwc comment)".into(),
    }
}

/// Human-readable differences: expected (`want`) vs live.
pub fn describe_drift(want: &Normalized, live: &Normalized, live_text: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    for (key, w) in &want.objects {
        match live.objects.get(key) {
            None => out.push(format!("{} {} was deleted", key.0, key.1)),
            Some(l) if l != w => out.push(describe_object_change(&key.0, &key.1, w, l)),
            _ => {}
        }
    }
    for key in live.objects.keys() {
        if !want.objects.contains_key(key) {
            out.push(format!("{} {} was added outside fwc", key.0, key.1));
        }
    }
    let chains: std::collections::BTreeSet<&String> = want.rules.keys().chain(live.rules.keys()).collect();
    let empty = Vec::new();
    for chain in chains {
        let w = want.rules.get(chain).unwrap_or(&empty);
        let l = live.rules.get(chain).unwrap_or(&empty);
        if w == l {
            continue;
        }
        let group = |rules: &[Value]| {
            let mut g: BTreeMap<String, Vec<Value>> = BTreeMap::new();
            for r in rules {
                g.entry(r.get("comment").and_then(Value::as_str).unwrap_or("").to_string()).or_default().push(r.clone());
            }
            g
        };
        let (gw, gl) = (group(w), group(l));
        let before = out.len();
        for (label, rw) in &gw {
            match gl.get(label) {
                None if label.is_empty() => {
                    for r in rw {
                        out.push(format!("chain {chain}: fwc rule deleted: {}", render_rule(chain, r, &[], None)));
                    }
                }
                None => out.push(format!("chain {chain}: rule {} was deleted", label_text(&rw[0]))),
                Some(rl) if rl != rw => {
                    if label.is_empty() {
                        // fwc's own housekeeping rules have no comment: report the difference
                        // as a multiset (hand-added rules usually land here).
                        let mut missing: Vec<&Value> = rw.iter().collect();
                        let mut extra = Vec::new();
                        for r in rl {
                            match missing.iter().position(|m| *m == r) {
                                Some(i) => {
                                    missing.remove(i);
                                }
                                None => extra.push(r),
                            }
                        }
                        for r in extra {
                            out.push(format!("chain {chain}: rule added outside fwc: {}", render_rule(chain, r, l, live_text)));
                        }
                        for r in missing {
                            out.push(format!("chain {chain}: fwc rule deleted: {}", render_rule(chain, r, &[], None)));
                        }
                    } else {
                        out.push(format!("chain {chain}: rule {} was changed", label_text(&rw[0])));
                    }
                }
                _ => {}
            }
        }
        for (label, rl) in &gl {
            if !gw.contains_key(label) {
                for r in rl {
                    out.push(format!("chain {chain}: rule added outside fwc: {}", render_rule(chain, r, l, live_text)));
                }
            }
        }
        if out.len() == before {
            out.push(format!("chain {chain}: rules were reordered"));
        }
    }
    out
}

fn describe_object_change(kind: &str, name: &str, w: &Value, l: &Value) -> String {
    if kind == "set" || kind == "map" {
        let elems = |v: &Value| -> Vec<String> {
            v.get("elem").and_then(Value::as_array).map(|a| a.iter().map(elem_text).collect()).unwrap_or_default()
        };
        let (ew, el) = (elems(w), elems(l));
        // Hash sets of the texts: linear in the set size (issue #27: `Vec::contains` made
        // this quadratic, and drift in a 1M-element set was never reported).
        let (hw, hl): (HashSet<&str>, HashSet<&str>) = (ew.iter().map(String::as_str).collect(), el.iter().map(String::as_str).collect());
        let added: Vec<_> = el.iter().filter(|e| !hw.contains(e.as_str())).cloned().collect();
        let removed: Vec<_> = ew.iter().filter(|e| !hl.contains(e.as_str())).cloned().collect();
        if !added.is_empty() || !removed.is_empty() {
            let mut parts = Vec::new();
            if !added.is_empty() {
                parts.push(format!("elements added outside fwc: {}", abbreviate(&added)));
            }
            if !removed.is_empty() {
                parts.push(format!("elements removed: {}", abbreviate(&removed)));
            }
            return format!("{kind} {name}: {}", parts.join("; "));
        }
    }
    if kind == "chain" {
        let (pw, pl) = (w.get("policy"), l.get("policy"));
        if pw != pl {
            return format!(
                "chain {name}: policy changed from {} to {}",
                pw.and_then(Value::as_str).unwrap_or("-"),
                pl.and_then(Value::as_str).unwrap_or("-")
            );
        }
    }
    format!("{kind} {name} was changed outside fwc")
}

fn elem_text(e: &Value) -> String {
    match e {
        Value::String(s) => s.clone(),
        Value::Object(m) if m.contains_key("prefix") => {
            let p = &m["prefix"];
            format!("{}/{}", p.get("addr").map(elem_text).unwrap_or_default(), p.get("len").map(|l| l.to_string()).unwrap_or_default())
        }
        Value::Object(m) if m.contains_key("range") => {
            let r = m["range"].as_array().cloned().unwrap_or_default();
            r.iter().map(elem_text).collect::<Vec<_>>().join("-")
        }
        Value::Object(m) if m.contains_key("elem") => {
            let el = &m["elem"];
            let val = el.get("val").map(elem_text).unwrap_or_default();
            match el.get("comment").and_then(Value::as_str) {
                Some(c) => format!("{val} ({c})"),
                None => val,
            }
        }
        Value::Object(m) if m.contains_key("concat") => {
            m["concat"].as_array().map(|a| a.iter().map(elem_text).collect::<Vec<_>>().join(" . ")).unwrap_or_default()
        }
        // map entry: [key, value]
        Value::Array(kv) if kv.len() == 2 => format!("{} : {}", elem_text(&kv[0]), elem_text(&kv[1])),
        Value::Number(n) => n.to_string(),
        other => other.to_string(),
    }
}

fn abbreviate(v: &[String]) -> String {
    if v.len() <= 5 {
        v.join(", ")
    } else {
        format!("{} … ({} in all)", v[..5].join(", "), v.len())
    }
}

/// A rule in nft syntax when the text listing has it (matched by position in its chain),
/// else compact JSON.
fn render_rule(chain: &str, rule: &Value, chain_rules: &[Value], text: Option<&str>) -> String {
    let idx = chain_rules.iter().position(|r| r == rule);
    if let (Some(text), Some(idx)) = (text, idx) {
        let mut in_chain = false;
        let mut i = 0;
        for line in text.lines() {
            let t = line.trim();
            if t.starts_with("chain ") {
                in_chain = t.split_whitespace().nth(1) == Some(chain);
                continue;
            }
            if !in_chain || t.is_empty() || t == "}" || t.starts_with("type ") || !t.contains("# handle") {
                continue;
            }
            if i == idx {
                return t.split(" # handle").next().unwrap_or(t).to_string();
            }
            i += 1;
        }
    }
    let s = rule.to_string();
    if s.len() > 160 {
        format!("{}…", &s[..s.char_indices().nth(160).map(|(i, _)| i).unwrap_or(s.len())])
    } else {
        s
    }
}

/// Packets and bytes per rule from a live listing, summed over the nft rules (and map
/// elements: map forwards have no rule of their own) carrying the same `fwc:<kind>:<name>`
/// comment.
pub fn counters(listing: &Value) -> Vec<RuleCounter> {
    fn add_counters(v: &Value, e: &mut (u64, u64)) {
        match v {
            Value::Object(m) => {
                if let Some(Value::Object(c)) = m.get("counter") {
                    e.0 += c.get("packets").and_then(Value::as_u64).unwrap_or(0);
                    e.1 += c.get("bytes").and_then(Value::as_u64).unwrap_or(0);
                }
                m.values().for_each(|x| add_counters(x, e));
            }
            Value::Array(a) => a.iter().for_each(|x| add_counters(x, e)),
            _ => {}
        }
    }
    /// Map/set elements: `{"elem": {"val": …, "counter": {…}, "comment": "fwc:…"}}`.
    fn elements(v: &Value, sums: &mut BTreeMap<String, (u64, u64)>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::Object(el)) = m.get("elem") {
                    if let Some(id) = el.get("comment").and_then(Value::as_str).and_then(fwc_compiler::artifacts::RuleId::parse) {
                        let e = sums.entry(id.to_string()).or_default();
                        if let Some(Value::Object(c)) = el.get("counter") {
                            e.0 += c.get("packets").and_then(Value::as_u64).unwrap_or(0);
                            e.1 += c.get("bytes").and_then(Value::as_u64).unwrap_or(0);
                        }
                    }
                }
                m.values().for_each(|x| elements(x, sums));
            }
            Value::Array(a) => a.iter().for_each(|x| elements(x, sums)),
            _ => {}
        }
    }
    let mut sums: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let Some(arr) = listing.get("nftables").and_then(Value::as_array) else { return Vec::new() };
    for o in arr {
        if let Some(rule) = o.get("rule") {
            if let Some((kind, name)) = rule_label(rule) {
                add_counters(rule.get("expr").unwrap_or(&Value::Null), sums.entry(format!("{kind}:{name}")).or_default());
            }
        } else if let Some(m) = o.get("map").or_else(|| o.get("set")) {
            if let Some(el) = m.get("elem") {
                elements(el, &mut sums);
            }
        }
    }
    sums.into_iter()
        .filter_map(|(key, (packets, bytes))| {
            let comment = format!("{}{key}", fwc_compiler::emit::nft::COMMENT_PREFIX);
            let (kind, name) = fwc_compiler::emit::nft::parse_rule_comment(&comment)?;
            Some(RuleCounter { rule: name.to_string(), kind, backend: BackendKind::Nftables, packets, bytes })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fwc_compiler::model::RuleKind;

    #[test]
    fn replace_tx_refuses_foreign_tables() {
        let doc = json!({"nftables": [{"table": {"family": "ip", "name": "nat"}}]});
        assert!(replace_tx(&doc).unwrap_err().to_string().contains("ip nat"));
        let doc = json!({"nftables": [{"add": {"rule": {"family": "inet", "table": "filter", "chain": "x", "expr": []}}}]});
        assert!(replace_tx(&doc).is_err());
        let ok = json!({"nftables": [{"table": {"family": "inet", "name": "fwc"}},
            {"chain": {"family": "inet", "table": "fwc", "name": "input"}}]});
        assert_eq!(replace_tx(&ok).unwrap()["nftables"].as_array().unwrap().len(), 4);
    }

    /// Issue #27: one element deleted behind fwc's back from a 200,000-element set is named
    /// (the comparison was quadratic: `Vec::contains` per element; bench/sets has the times).
    #[test]
    fn drift_in_a_big_set_names_the_element() {
        let addrs: Vec<Value> = (0..200_000u32).map(|i| json!(std::net::Ipv4Addr::from(0x0a00_0000 + i).to_string())).collect();
        let set = |elems: &[Value]| json!({"family": "inet", "table": "fwc", "name": "bl_v4_32", "type": "ipv4_addr", "elem": elems});
        let mut live = addrs.clone();
        let gone = live.remove(123_456);
        live.push(json!("192.0.2.7"));
        let d = describe_object_change("set", "bl_v4_32", &set(&addrs), &set(&live));
        assert_eq!(d, format!("set bl_v4_32: elements added outside fwc: 192.0.2.7; elements removed: {}", gone.as_str().unwrap()));
    }

    #[test]
    fn health_rewrites_of_a_dispatch_chain_are_not_drift() {
        let dispatch = |targets: &[&str], comment: &str| {
            let set: Vec<Value> = targets.iter().enumerate().map(|(i, t)| json!([i, {"goto": {"target": t}}])).collect();
            json!({"nftables": [{"rule": {"family": "inet", "table": "fwc", "chain": "fhc4_web", "comment": comment,
                "expr": [{"vmap": {"key": {"numgen": {"mode": "inc", "mod": targets.len(), "offset": 0}}, "data": {"set": set}}}]}}]})
        };
        let want = normalize(&dispatch(&["fhc4_web_t0", "fhc4_web_t1", "fhc4_web_t2"], "fwc:forward:web"));
        for (live, ok) in [
            (dispatch(&["fhc4_web_t0", "fhc4_web_t2"], "fwc:forward:web"), true),
            (dispatch(&["fhc4_web_t1"], "fwc:forward:web"), true),
            (dispatch(&["fhc4_web_t2", "fhc4_web_t0"], "fwc:forward:web"), false),
            (dispatch(&["fhc4_web_t0", "elsewhere"], "fwc:forward:web"), false),
            (dispatch(&[], "fwc:forward:web"), false),
            (dispatch(&["fhc4_web_t0"], "fwc:forward:other"), false),
        ] {
            let mut live = normalize(&live);
            accept_health_rewrites(&want, &mut live);
            assert_eq!(describe_drift(&want, &live, None).is_empty(), ok, "{live:?}");
        }
    }

    #[test]
    fn dns_installs_in_an_empty_dns_chain_are_not_drift() {
        let chain = |name: &str| json!({"chain": {"family": "inet", "table": "fwc", "name": name}});
        let rule = |chain: &str, comment: &str, nat: Value| {
            json!({"rule": {"family": "inet", "table": "fwc", "chain": chain, "comment": comment,
                "expr": [{"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": "tcp"}}, {"dnat": nat}]}})
        };
        let want = normalize(&json!({"nftables": [chain("fdn4_api")]}));
        let one = json!({"family": "ip", "addr": "198.18.2.2", "port": 8443});
        let map = json!({"family": "ip", "addr": {"map": {"key": {"numgen": {"mode": "inc", "mod": 2, "offset": 0}}, "data": {"set": [[0, "198.18.2.2"], [1, "198.18.2.3"]]}}}});
        for (live, ok) in [
            (vec![chain("fdn4_api")], true),
            (vec![chain("fdn4_api"), rule("fdn4_api", "fwc:forward:api", one.clone())], true),
            (vec![chain("fdn4_api"), rule("fdn4_api", "fwc:forward:api", map)], true),
            (vec![chain("fdn4_api"), rule("fdn4_api", "fwc:forward:other", one.clone())], false),
            (vec![chain("fdn4_api"), rule("fdn4_api", "fwc:forward:api", json!({"family": "ip6", "addr": "2001:db8::1"}))], false),
            (vec![chain("fdn4_api"), rule("fdn4_api", "fwc:forward:api", one.clone()), rule("fdn4_api", "fwc:forward:api", one)], false),
        ] {
            let mut live = normalize(&json!({"nftables": live}));
            accept_dns_installs(&want, &mut live);
            assert_eq!(describe_drift(&want, &live, None).is_empty(), ok, "{live:?}");
        }
    }

    #[test]
    fn normalize_drops_volatile_parts() {
        let a = json!({"nftables": [{"metainfo": {}}, {"table": {"family": "inet", "name": "fwc", "handle": 3}},
            {"set": {"family": "inet", "table": "fwc", "name": "s", "handle": 4, "type": "ipv4_addr", "elem": ["10.0.0.2", "10.0.0.1"]}},
            {"rule": {"family": "inet", "table": "fwc", "chain": "input", "handle": 9, "comment": "fwc:filter:ssh",
              "expr": [{"counter": {"packets": 5, "bytes": 300}}, {"accept": null}]}}]});
        let b = json!({"nftables": [{"table": {"family": "inet", "name": "fwc", "handle": 1}},
            {"set": {"family": "inet", "table": "fwc", "name": "s", "handle": 2, "type": "ipv4_addr", "elem": ["10.0.0.1", "10.0.0.2"]}},
            {"rule": {"family": "inet", "table": "fwc", "chain": "input", "handle": 3, "comment": "fwc:filter:ssh",
              "expr": [{"counter": {"packets": 0, "bytes": 0}}, {"accept": null}]}}]});
        assert_eq!(normalize(&a), normalize(&b));
        let c = counters(&a);
        assert_eq!(c, vec![RuleCounter { rule: "ssh".into(), kind: RuleKind::Filter, backend: BackendKind::Nftables, packets: 5, bytes: 300 }]);
    }

    #[test]
    fn map_element_counters_and_text() {
        let l = json!({"nftables": [{"map": {"family": "inet", "table": "fwc", "name": "fwd4_addr", "elem": [
            [{"elem": {"val": {"concat": ["tcp", 8080]}, "counter": {"packets": 3, "bytes": 180}, "comment": "fwc:forward:web"}}, "10.0.0.5"]]}}]});
        assert_eq!(counters(&l), vec![RuleCounter { rule: "web".into(), kind: RuleKind::Forward, backend: BackendKind::Nftables, packets: 3, bytes: 180 }]);
        let e = &l["nftables"][0]["map"]["elem"][0];
        assert_eq!(elem_text(e), "tcp . 8080 (fwc:forward:web) : 10.0.0.5");
    }

    #[test]
    fn drift_is_described_per_rule() {
        let base = |elems: Value, rules: Vec<Value>, policy: &str| {
            let mut v = vec![
                json!({"chain": {"family": "inet", "table": "fwc", "name": "input", "policy": policy}}),
                json!({"set": {"family": "inet", "table": "fwc", "name": "office", "elem": elems}}),
            ];
            for r in rules {
                v.push(json!({"rule": r}));
            }
            normalize(&json!({"nftables": v}))
        };
        let ssh = json!({"chain": "input", "comment": "fwc:filter:ssh", "expr": [{"accept": null}]});
        let ssh2 = json!({"chain": "input", "comment": "fwc:filter:ssh", "expr": [{"drop": null}]});
        let web = json!({"chain": "input", "comment": "fwc:filter:web", "expr": [{"accept": null}]});
        let hand = json!({"chain": "input", "expr": [{"drop": null}]});
        let want = base(json!(["10.0.0.1"]), vec![ssh.clone(), web.clone()], "drop");
        assert!(describe_drift(&want, &want, None).is_empty());
        let live = base(json!(["10.0.0.1", "10.9.9.9"]), vec![ssh2, hand.clone()], "accept");
        let d = describe_drift(&want, &live, None);
        assert!(d.contains(&"chain input: policy changed from drop to accept".to_string()), "{d:?}");
        assert!(d.contains(&"set office: elements added outside fwc: 10.9.9.9".to_string()), "{d:?}");
        assert!(d.contains(&"chain input: rule filter \"ssh\" was changed".to_string()), "{d:?}");
        assert!(d.contains(&"chain input: rule filter \"web\" was deleted".to_string()), "{d:?}");
        assert!(d.iter().any(|l| l.starts_with("chain input: rule added outside fwc:")), "{d:?}");
        let est = json!({"chain": "input", "expr": [{"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": ["established"]}}, {"accept": null}]});
        let want2 = base(json!(["10.0.0.1"]), vec![est.clone(), ssh.clone()], "drop");
        let live2 = base(json!(["10.0.0.1"]), vec![est.clone(), ssh.clone(), hand.clone()], "drop");
        let d = describe_drift(&want2, &live2, None);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].starts_with("chain input: rule added outside fwc: "), "{d:?}");
        let live3 = base(json!(["10.0.0.1"]), vec![ssh.clone()], "drop");
        let d = describe_drift(&want2, &live3, None);
        assert!(d.len() == 1 && d[0].starts_with("chain input: fwc rule deleted: "), "{d:?}");
        let reordered = base(json!(["10.0.0.1"]), vec![web, ssh], "drop");
        assert_eq!(describe_drift(&want, &reordered, None), vec!["chain input: rules were reordered".to_string()]);
    }
}
