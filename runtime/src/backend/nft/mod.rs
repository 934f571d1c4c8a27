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
//!   elements). [`NftChange`] says which and why. Elements changed outside fwc in plain hash
//!   sets (a big set's hash sets and shards), when nothing else drifted, are put back instead
//!   by the diff's batch itself: the observe that found them names them, and the batch deletes
//!   the live elements fwc did not apply and adds the applied ones that are missing
//!   ([`diff::repair`]); `fwc apply` after a plan lists the live table again to find them. A diff that only adds is checked with
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
//!
//! Files: [`cmd`] runs nft (also for the quota code), [`render`] the scratch-namespace
//! renderings, [`diff`] the batch (pure), [`doc`] documents and the replace batch, [`normalize`]
//! listings made comparable, [`drift_text`] drift in words, [`counters`] per-rule counters,
//! [`lazy`] element lists kept as text, [`stamp`] the in-sync generation stamp, [`setdump`] the
//! elements of big sets' hash sets read over netlink.

pub mod cmd;
mod compare;
mod counters;
mod diff;
mod doc;
mod drift_text;
pub mod lazy;
mod normalize;
mod render;
mod setdump;
mod stamp;

pub use cmd::NftCmd;
pub use counters::counters;
pub use diff::{ElementCount, NftChange, NftMode};
pub use doc::{dynamic_sets, replace_tx};
pub use drift_text::{describe_drift, rule_label};
pub use normalize::{hash_of_listing, normalize, structure, Normalized};

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::PathBuf;

use doc::{add_table, declaration, delete_table, is_empty_doc};

use fwc_compiler::artifacts::{sha256_hex, Artifacts, BackendKind, NftDoc, NFT_TABLE};
use miette::{miette, Result, WrapErr};
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
    /// The batch puts back set elements changed outside fwc ([`Repair`]): when the kernel
    /// rejects it, the whole-table replace that repaired such drift before is made instead,
    /// without `--allow-replace` (it discards nothing the plan promised to keep).
    repairing: bool,
}

/// Set elements changed outside fwc, found by an observe, and the batch that puts them back
/// ([`diff::repair`]); `reason`: the full-replace reason the same observe gave.
#[derive(Debug, Clone)]
struct Repair {
    reason: String,
    counts: Vec<ElementCount>,
    batch: Vec<Value>,
}

/// How the reason for a full replace starts when an observe found set elements changed
/// outside fwc (the reason a plan hands to the apply's transaction).
const ELEMENTS_CHANGED: &str = "the elements of ";

/// fwc's nftables table, optionally inside a named network namespace.
#[derive(Debug)]
pub struct NftBackend {
    /// How nft is run (binary, network namespace).
    pub cmd: NftCmd,
    /// The operator accepts a whole-table replace the diff cannot avoid (`--allow-replace`);
    /// without it such an apply is refused and nothing changes.
    allow_replace: bool,
    staged: Option<Staged>,
    /// quota: the quotas of the ruleset being applied (from its manifest), whose
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
    /// The elements an observe found changed outside fwc, when the only drift is in plain
    /// hash sets: the next prepare puts back just those (with `full_replace`'s reason).
    repair: Option<Repair>,
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

impl NftBackend {
    pub fn new(netns: Option<String>) -> NftBackend {
        NftBackend {
            cmd: NftCmd::new(netns),
            allow_replace: false,
            staged: None,
            quota_policies: Vec::new(),
            committed: false,
            verify_pending: false,
            base: None,
            full_replace: None,
            repair: None,
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
        let Some(live) = self.cmd.list_terse()? else { return Ok(None) };
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
        self.cmd.run_file(&replace_tx(nftables)?, false)
    }

    /// Delete fwc's table if it exists (atomic; no error when absent).
    pub fn delete_table(&self) -> Result<()> {
        self.cmd.run_file(&json!({"nftables": [add_table(), delete_table()]}), false)
    }

    /// sha256 over the normalised live table ("absent" when there is none): what a saved plan
    /// records, so `fwc apply plan.json` can refuse when the live state changed since.
    pub fn live_hash(&self) -> Result<String> {
        Ok(hash_of_listing(self.cmd.list_table()?.as_ref()))
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

/// Why the table is replaced whole; `lossy`: the diff could not express the change and the
/// live table holds state fwc promised to keep (not a first apply, nor a repair of elements
/// changed outside fwc): the apply refuses it unless the operator allows it.
struct Replace {
    reason: String,
    lossy: bool,
}

/// The error of an apply that would replace the table whole where its plan did not say so
/// (or said so and was not allowed): nothing is changed.
fn refusal(reason: &str, resets: &[String]) -> miette::Report {
    let lost = if resets.is_empty() { String::new() } else { format!(": {}", resets.join("; ")) };
    miette!(
        help = "`fwc plan` names what a replace resets; apply with --allow-replace to accept it",
        "nftables: {REPLACE_REFUSED}, which discards the state the plan keeps{lost}; \
         reason: {reason}. Nothing was changed (pass --allow-replace to replace it anyway)"
    )
}

/// The words every refused whole-table replace starts with (the agent reports it by them).
pub const REPLACE_REFUSED: &str = "refusing to replace table inet fwc whole";

/// What a redeclared set or map loses, in words (its live elements counted).
fn redeclare_reset(cmd: &NftCmd, live: &Value, kind: &str, name: &str) -> String {
    let what = if fwc_compiler::features::persource::parse_set_name(name).is_some() { "tracked sources" } else { "elements" };
    match live_elements(cmd, live, kind, name) {
        Some(n) => format!("{kind} {name} is replaced (its declaration changes): its {n} {what} are reset"),
        None => format!("{kind} {name} is replaced (its declaration changes): its {what} are reset"),
    }
}

/// How many elements a live set or map holds: from the listing when it has them, else listed.
fn live_elements(cmd: &NftCmd, live: &Value, kind: &str, name: &str) -> Option<usize> {
    let body = live["nftables"].as_array()?.iter().find_map(|o| o.get(kind).filter(|b| b["name"] == name))?;
    if let Some(e) = body.get("elem").and_then(Value::as_array) {
        return Some(e.len());
    }
    let listed = cmd.list_object(kind, name).ok()?;
    Some(listed["nftables"].as_array()?.iter().find_map(|o| o.get(kind)?.get("elem")?.as_array().map(Vec::len)).unwrap_or(0))
}

/// What a whole-table replace discards of `live`: every rule's counters and `limit` / `ct
/// count` state, and the elements of the dynamic and per-source sets it does not keep (a
/// replace keeps those whose declaration is unchanged, `wanted`).
fn replace_resets(cmd: &NftCmd, live: &Value, wanted: &[(String, Value)]) -> Vec<String> {
    let items = live["nftables"].as_array().map(Vec::as_slice).unwrap_or_default();
    let rules = items.iter().filter(|o| o.get("rule").is_some()).count();
    let mut out = vec![format!("the counters and limit/ct count state of all {rules} rules are reset")];
    for set in dynamic_sets(&json!({"nftables": items.iter().filter_map(|o| o.get("set")).map(|s| json!({"set": s})).collect::<Vec<_>>()})) {
        let kept = wanted.iter().any(|(n, w)| *n == set.0 && declaration(w) == declaration(&set.1));
        if !kept {
            out.push(redeclare_reset(cmd, live, "set", &set.0).replace("is replaced (its declaration changes)", "is replaced"));
        }
    }
    out
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
            (Some(_), Some(_)) => stamp::token(self.cmd.netns.as_deref()).ok(),
            _ => None,
        };
        let (Some(a), Some(t)) = (applied, token) else {
            let live = self.cmd.list_table()?;
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
            let terse = self.cmd.list_terse()?;
            if terse.is_some() {
                return Ok(LiveView { hash: in_sync_hash(terse.as_ref(), &d), counters: terse.as_ref().map(counters).unwrap_or_default(), listing: terse, drift: vec![] });
            }
        }
        let live = self.cmd.list_table()?;
        let drift = self.drift_of(&a.nftables, live.as_ref())?.drift;
        if !drift.is_empty() || live.is_none() || is_empty_doc(&a.nftables)? {
            return Ok(LiveView { hash: hash_of_listing(live.as_ref()), counters: live.as_ref().map(counters).unwrap_or_default(), listing: live, drift });
        }
        let terse = self.cmd.list_terse()?;
        if stamp::token(self.cmd.netns.as_deref()).ok().as_ref() == Some(&t) {
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
            Err(r) => Ok((self.replace_change(r, next, live), replace_tx(next.value())?)),
        }
    }

    /// [`Self::change`] without building a full replace's batch (the plan shows the change; a
    /// million-element table is not copied into a batch that is thrown away).
    pub fn planned_change(&mut self, base: Option<&NftDoc>, next: &NftDoc, live: Option<&Value>, full_replace: Option<&str>) -> Result<NftChange> {
        Ok(match self.diff_or_reason(base, next, live, full_replace)? {
            Ok((c, _)) => c,
            Err(r) => self.replace_change(r, next, live),
        })
    }

    /// A full replace for `r`, naming the state it discards when it is one the diff could not
    /// make (`r.lossy`: the apply refuses it unless the operator allows it).
    fn replace_change(&self, r: Replace, next: &NftDoc, live: Option<&Value>) -> NftChange {
        let mut c = NftChange::full(r.reason);
        if let (true, Some(live)) = (r.lossy, live) {
            c.needs_allow_replace = true;
            c.resets = replace_resets(&self.cmd, live, &dynamic_sets(&lazy::skeleton(next)));
        }
        c
    }

    /// The diff, or why the table is replaced whole (`Err`).
    fn diff_or_reason(
        &mut self,
        base: Option<&NftDoc>,
        next: &NftDoc,
        live: Option<&Value>,
        full_replace: Option<&str>,
    ) -> Result<std::result::Result<(NftChange, Value), Replace>> {
        let full = |reason: &str| Ok(Err(Replace { reason: reason.to_string(), lossy: false }));
        let next_skel = lazy::skeleton(next);
        if is_empty_doc(&next_skel)? {
            return Ok(Ok((NftChange::full("nothing to apply: the table is deleted"), json!({"nftables": [add_table(), delete_table()]}))));
        }
        let Some(live) = live else { return full("first apply (table inet fwc does not exist)") };
        let Some(base) = base else { return full("fwc has not applied anything here before") };
        // Set elements changed outside fwc: put back by the diff's batch when the observe that
        // found them could say which (`repair`), else the whole table is replaced.
        let repair = match full_replace {
            Some(reason) => match self.repair.clone().filter(|r| r.reason == reason) {
                Some(r) => Some(r),
                None => return full(reason),
            },
            None => None,
        };
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
        let mut d = match &reduced {
            Some((b, n)) => diff::diff(b, n, &canon, live),
            None => diff::diff(base.value(), next.value(), &canon, live),
        };
        // A replaced set is created again with every element: not from the reduced lists.
        if reduced.is_some() && d.as_ref().is_ok_and(|(c, _)| !c.redeclared.is_empty()) {
            d = diff::diff(base.value(), next.value(), &canon, live);
        }
        Ok(match (d, repair) {
            (Ok((mut c, mut tx)), repair) => {
                for (kind, name) in c.redeclared.clone() {
                    c.resets.push(redeclare_reset(&self.cmd, live, &kind, &name));
                }
                if let Some(r) = repair {
                    // First the live elements back to the applied ones, then the diff from those.
                    let batch = tx["nftables"].as_array_mut().expect("a batch is an array");
                    batch.splice(0..0, r.batch);
                    c.commands = batch.len();
                    c.mode = NftMode::Diff;
                    c.repaired = r.counts;
                    c.reason = r.reason;
                }
                Ok((c, tx))
            }
            // What replaced the table before the repair was built: not a lossy replace.
            (Err(_), Some(r)) => Err(Replace { reason: r.reason, lossy: false }),
            (Err(reason), None) => Err(Replace { reason, lossy: true }),
        })
    }

    /// quota: restore the usage of every quota object `tx` (re)creates, from the
    /// live count or the ledger in the state dir (`<state dir>/cache`'s parent); see
    /// [`crate::quota::restore_used`]. Costs one `nft list quotas` when `tx` adds a quota.
    fn restore_quotas(&self, tx: &mut Value, policies: &[fwc_artifacts::quota::QuotaPolicy]) {
        let adds_quota = tx["nftables"].as_array().is_some_and(|b| b.iter().any(|c| c.get("add").and_then(|a| a.get("quota")).is_some()));
        if policies.is_empty() || !adds_quota {
            return;
        }
        let live = crate::quota::kernel::live_usage(&self.cmd).unwrap_or_else(|e| {
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

    fn allow_replace(&mut self, allow: bool) {
        self.allow_replace = allow;
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
        let live = self.cmd.list_terse().wrap_err("nftables: prepare failed")?;
        let mut full_replace = self.full_replace.take();
        let base = self.base.take();
        if let (Some(reason), None, Some(b)) = (&full_replace, &self.repair, &base) {
            // A plan saw set elements changed outside fwc (`fwc apply` after its plan): which
            // ones, again from the live table, so only they are put back.
            if reason.starts_with(ELEMENTS_CHANGED) {
                match self.drift(b) {
                    Ok(_) => full_replace = self.full_replace.take(),
                    Err(e) => tracing::warn!("nftables: cannot list the drifted elements ({e}); replacing the table whole"),
                }
            }
        }
        let changed = self.change(base.as_ref(), &next.nftables, live.as_ref(), full_replace.as_deref());
        self.repair = None;
        let (mut change, mut tx) = changed.wrap_err("nftables: prepare failed")?;
        let repairing = !change.repaired.is_empty();
        if change.needs_allow_replace && !self.allow_replace {
            self.base = base;
            return Err(refusal(&change.reason, &change.resets));
        }
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
            _ => self.cmd.run_file(&tx, true),
        };
        if let (Err(e), NftMode::Diff | NftMode::Unchanged) = (&checked, change.mode) {
            // The live table is not what the last apply left (a killed apply, hand edits of
            // set elements): replace it whole instead.
            let reason = format!("the diff does not apply to the live table ({})", e.to_string().lines().last().unwrap_or("").trim());
            if !self.allow_replace && !repairing {
                // Not what the plan said: refused, nothing changed (the check changes nothing).
                let resets = live.as_ref().map(|l| replace_resets(&self.cmd, l, &dynamic_sets(&lazy::skeleton(&next.nftables)))).unwrap_or_default();
                self.base = base;
                return Err(refusal(&reason, &resets));
            }
            tracing::warn!("nftables: {reason}; replacing the table whole (--allow-replace)");
            change = NftChange::full(reason);
            tx = replace_tx(&next.nftables)?;
            if injected_failure("prepare", BackendKind::Nftables) {
                tx["nftables"].as_array_mut().unwrap().push(json!({"add": {"rule": {
                    "family": "inet", "table": NFT_TABLE, "chain": "fwc-test-injected-missing-chain",
                    "expr": [{"accept": null}]}}}));
            }
            checked = if injected { self.cmd.run_file(&tx, true) } else { Ok(()) };
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
        self.staged = Some(Staged { tx, dynamic, change, unchecked_fallback, digest: digest(next), repairing });
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
        let before = self.cache_dir.as_ref().and_then(|_| stamp::token(self.cmd.netns.as_deref()).ok());
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
        let mut result = if tx["nftables"].as_array().is_some_and(Vec::is_empty) { Ok(()) } else { self.cmd.run_file(tx, false) };
        if let (Err(e), Some(_), false) = (&result, &staged.unchecked_fallback, self.allow_replace || staged.repairing) {
            // The unchecked diff does not apply to the live table: the kernel aborted it, so
            // nothing changed; a whole-table replace is not what the plan said: refused.
            let reason = format!("the diff does not apply to the live table ({})", e.to_string().lines().last().unwrap_or("").trim());
            result = Err(refusal(&reason, &[]));
        } else if let (Err(e), Some(doc)) = (&result, &staged.unchecked_fallback) {
            // The unchecked diff does not apply to the live table (nothing changed: the kernel
            // aborted it): replace the table whole, as prepare does for a checked diff.
            tracing::warn!("nftables: the diff does not apply to the live table ({e}); replacing the table whole (--allow-replace)");
            result = replace_tx(doc.value()).and_then(|mut full| {
                self.restore_quotas(&mut full, &policies);
                if injected_failure("commit", BackendKind::Nftables) {
                    full["nftables"].as_array_mut().unwrap().push(json!({"create": {"table": {"family": "inet", "name": NFT_TABLE}}}));
                }
                Self::log_batch(&full);
                self.cmd.run_file(&full, false)
            });
            staged.change = NftChange::full("the diff does not apply to the live table");
        }
        let after = before.as_ref().and_then(|_| stamp::token(self.cmd.netns.as_deref()).ok());
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
                    Some(keep) => self.cmd.run_file(&keep, false),
                    None => self.cmd.run_file(&tx, false),
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
                let live = self.cmd.list_terse()?;
                let (change, mut tx) = self.change(Some(&committed.nftables), prev, live.as_ref(), None)?;
                if change.mode != NftMode::Diff && change.mode != NftMode::Unchanged {
                    return Ok(false);
                }
                self.restore_quotas(&mut tx, &previous.map(|p| p.manifest.setup.quotas.clone()).unwrap_or_default());
                tracing::info!("nftables: rollback: {}", change.describe());
                Self::log_batch(&tx);
                if !tx["nftables"].as_array().is_some_and(Vec::is_empty) {
                    self.cmd.run_file(&tx, false)?;
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
            let live = self.cmd.list_terse()?;
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
