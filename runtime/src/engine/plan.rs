//! The plan against the live host: what `fwc apply` would change (per-rule diff of the applied
//! and the new artifacts, artifacts that change, drift of the live dataplane, sysctls), saved by
//! `fwc plan --out` and applied only while the live state still hashes the same.

use std::collections::BTreeMap;

use fwc_compiler::artifacts::{sha256_hex, sha256_pretty, Artifacts, FORWARD_FILE, NFTABLES_FILE, QOS_FILE};
use miette::Result;
use serde::{Deserialize, Serialize};

use super::transaction::{self, SysctlStatus};
use crate::backend::nft::{lazy, NftBackend, NftChange, NftMode};
use crate::backend::published;
use crate::state::{self, StateDir};

/// Version of the saved plan file format.
pub const PLAN_VERSION: u32 = 1;

/// A plan against the live host: what `fwc apply` would change. Saved by `--out` and applied
/// only while the live state still hashes to `live_hash`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LivePlan {
    pub version: u32,
    pub host: String,
    pub source: String,
    pub created_at: String,
    /// sha256 over the live dataplane state (normalised nftables table) and the applied generation.
    pub live_hash: String,
    pub applied_generation: Option<String>,
    pub applied_commit: Option<String>,
    pub commit: Option<String>,
    /// Per-rule changes between the applied artifacts and the new ones (recomputed when a
    /// saved plan is applied).
    #[serde(skip_deserializing)]
    pub rules: Option<fwc_compiler::diff::Plan>,
    /// Artifacts whose content changes.
    pub artifacts_changed: Vec<String>,
    /// Differences between the live dataplane and the applied artifacts (hand edits).
    pub drift: Vec<String>,
    /// How the apply changes `table inet fwc`: a diff (and what it touches) or a full replace
    /// (and why).
    #[serde(default)]
    pub nftables: Option<NftChange>,
    pub sysctls: Vec<SysctlStatus>,
    /// Ports other programs (Docker, Podman) publish with DNAT that the new rules leave open
    /// to every client (docs/containers.md). Warnings, not changes.
    #[serde(default)]
    pub published_open: Vec<String>,
    /// What the apply needs of the host that it lacks (an interface a shape or a rule names,
    /// a port a userspace forward binds): warnings here, and the apply refuses the ones that
    /// block it with the same words ([`super::host_needs`]).
    #[serde(default)]
    pub host_needs: Vec<super::host_needs::Missing>,
    /// The exact artifacts `fwc apply plan.json` applies.
    pub artifacts: Artifacts,
}

impl LivePlan {
    /// Whether applying it changes anything on the host (rules, artifacts, drift, sysctls).
    pub fn has_changes(&self) -> bool {
        self.rules.as_ref().is_some_and(|r| !r.changes.is_empty())
            || !self.artifacts_changed.is_empty()
            || !self.drift.is_empty()
            || self.sysctls.iter().any(|s| s.was.as_deref() != Some(s.want.as_str()))
    }

    /// The reason to pass as [`super::transaction::ApplyOptions::nft_full_replace`]: the plan
    /// saw what a diff cannot repair (set elements changed outside fwc), or said "full
    /// replace" for another reason the transaction would find again. Not a replace that needs
    /// `--allow-replace`: the transaction finds that one again and refuses or makes it. A diff
    /// that puts back elements changed outside fwc passes the same reason: the transaction
    /// finds those elements again and puts back only them.
    pub fn nft_full_replace_reason(&self) -> Option<String> {
        self.nftables
            .as_ref()
            .filter(|c| (c.mode == NftMode::FullReplace && !c.needs_allow_replace) || !c.repaired.is_empty())
            .map(|c| c.reason.clone())
    }
}

/// The sha256 of each artifact file's text (hashed while serialising: with a large set the
/// text is tens of MB, and building it twice per plan showed in the profile).
fn file_hashes(a: &Artifacts) -> BTreeMap<&'static str, String> {
    // Hashed once per document, from its text (what `to_pretty` of the tree writes): a set
    // file's million elements are not serialised again, nor hashed twice.
    let nft = a.nftables.sha256().to_string();
    BTreeMap::from([(NFTABLES_FILE, nft), (QOS_FILE, sha256_pretty(&a.qos)), (FORWARD_FILE, sha256_pretty(&a.forward))])
}

/// The per-rule changes between the applied and the new artifacts. With both `nftables.json`
/// held as the compiler's text, the plan's element lists come from the documents reduced to
/// the elements around each difference ([`lazy::reduced_pair`]: the same lists and counts,
/// since the plan skips each set's common head and tail too), not from a parse of every element.
fn rule_changes(current: Option<&Artifacts>, next: &Artifacts) -> fwc_compiler::diff::Plan {
    if let Some((b, n)) = current.and_then(|c| lazy::reduced_pair(&c.nftables, &next.nftables, |_, _| false)) {
        let reduced = |a: &Artifacts, doc: serde_json::Value| Artifacts {
            nftables: doc.into(),
            qos: a.qos.clone(),
            forward: a.forward.clone(),
            manifest: a.manifest.clone(),
        };
        return fwc_compiler::diff::plan(Some(&reduced(current.unwrap(), b)), &reduced(next, n));
    }
    fwc_compiler::diff::plan(current, next)
}

/// sha256 over the live state: the live nftables table (see [`NftBackend::observe_applied`])
/// plus the applied generation.
pub fn live_hash(state: &StateDir, netns: Option<&str>) -> Result<String> {
    let mut nft = NftBackend::new(netns.map(str::to_string)).with_cache_dir(state.path.join(state::CACHE_DIR));
    let current = state.current()?;
    live_hash_of(state, &nft.observe_applied(current.as_ref().map(|g| &g.artifacts))?.hash)
}

fn live_hash_of(state: &StateDir, nft_hash: &str) -> Result<String> {
    let ptr = state.pointer()?;
    Ok(sha256_hex(format!("nft={nft_hash}\ngen={}\n", ptr.current.as_deref().unwrap_or("-")).as_bytes()))
}

/// Build the plan of applying `next` on the live host.
pub fn make_plan(state: &StateDir, netns: Option<&str>, next: Artifacts, source: String) -> Result<LivePlan> {
    let mut nft = NftBackend::new(netns.map(str::to_string)).with_cache_dir(state.path.join(state::CACHE_DIR));
    let current = state.current()?;
    // One observation of the live table serves the hash and the drift check (a terse listing
    // when nothing committed anything since fwc last saw it in sync, else a full one).
    let view = nft.observe_applied(current.as_ref().map(|g| &g.artifacts))?;
    let live_hash = live_hash_of(state, &view.hash)?;
    let (live, mut drift) = (view.listing, view.drift);
    // The nftables change the apply makes (the same computation as its prepare; set elements
    // changed outside fwc, seen by the drift check above, make it a full replace).
    let full_reason = nft.full_replace_pending().map(str::to_string);
    let nftables = nft.planned_change(current.as_ref().map(|g| &g.artifacts.nftables), &next.nftables, live.as_ref(), full_reason.as_deref())?;
    // The other dataplanes' drift (QoS, forwarder); the apply heals it like nftables drift.
    let empty;
    let applied = match &current {
        Some(g) => &g.artifacts,
        None => {
            empty = transaction::empty_artifacts(&next.manifest.host);
            &empty
        }
    };
    drift.extend(super::observe::besides_nft(netns, &state.path, applied).drift);
    // Drift lines name the rule's file:line as the applied generation recorded it.
    let drift = crate::backend::sources::locate(drift, &applied.manifest);
    let rules = rule_changes(current.as_ref().map(|g| &g.artifacts), &next);
    let old_h = current.as_ref().map(|g| file_hashes(&g.artifacts)).unwrap_or_default();
    let artifacts_changed =
        file_hashes(&next).into_iter().filter(|(f, h)| old_h.get(f) != Some(h)).map(|(f, _)| f.to_string()).collect();
    let sysctls = transaction::check_sysctls(&next, netns);
    // Read only; a host without nft tables of others (or an nft that cannot list) warns nothing.
    let published_open = match nft.cmd.list_ruleset_terse() {
        Ok(all) => published::open_to_everyone(&published::published_ports(&all), &lazy::skeleton(&next.nftables)),
        Err(_) => Vec::new(),
    };
    let host_needs = super::host_needs::check(&next, current.as_ref().map(|g| &g.artifacts), netns);
    Ok(LivePlan {
        version: PLAN_VERSION,
        host: next.manifest.host.clone(),
        source,
        created_at: state::rfc3339(state::now_unix()),
        live_hash,
        applied_generation: current.as_ref().map(|g| g.name.clone()),
        applied_commit: current.as_ref().and_then(|g| g.meta.commit.clone()),
        commit: next.manifest.commit.clone(),
        rules: Some(rules),
        artifacts_changed,
        drift,
        nftables: Some(nftables),
        sysctls,
        published_open,
        host_needs,
        artifacts: next,
    })
}
