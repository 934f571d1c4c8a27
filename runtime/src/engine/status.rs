//! `fwc status`: what is applied (generation, commit, source, rules per backend), the previous
//! generation, a pending confirmation, drift of every live dataplane (nftables, eBPF QoS, the
//! userspace forwarder) and the per-rule counters.

use std::collections::BTreeMap;

use miette::Result;
use serde::Serialize;

use super::{observe, transaction};
use crate::backend::nft::NftBackend;
use crate::backend::Backend;
use crate::state::{self, PendingConfirm, StateDir};

/// The status of one state dir and its live host.
#[derive(Debug, Serialize)]
pub struct Status {
    pub state_dir: String,
    pub applied: bool,
    pub generation: Option<String>,
    pub commit: Option<String>,
    pub host: Option<String>,
    pub applied_at: Option<String>,
    pub source: Option<String>,
    /// Rules per backend (from the manifest; a rule on two backends counts on both).
    pub rules_per_backend: BTreeMap<String, usize>,
    /// nft rules in the applied nftables.json.
    pub nft_rules: usize,
    pub drift: bool,
    pub drift_details: Vec<String>,
    pub previous_generation: Option<String>,
    pub previous_commit: Option<String>,
    pub pending_confirm: Option<PendingConfirm>,
    pub counters: Vec<crate::backend::RuleCounter>,
    /// Targets of health-checked forwards (kernel and userspace), as the forwarder probes them.
    pub target_health: Vec<TargetHealth>,
    /// What `fwc agent` last recorded in this state dir (`agent.json`): the newest commit it
    /// handled and how, and the fleet rollout it follows (why it holds back). None without an
    /// agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentView>,
    /// Per-source limits: sources tracked per limit and family, and how many fit
    /// (at the size, new sources are refused).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub per_source: Vec<crate::backend::PerSourceFill>,
    /// Schedules: the applied rules are right until then (the manifest's
    /// `valid_until`: a time zone's clock change, an `until=`); the agent compiles again then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub valid_until: Option<String>,
    /// Quotas: used/limit/period per quota of the applied rules. Absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub quotas: Vec<crate::quota::QuotaStatus>,
}

/// The agent's own view, from its journal.
pub use crate::state::agent_journal::AgentView;

/// One health-checked target of a forward.
#[derive(Debug, Serialize)]
pub struct TargetHealth {
    pub rule: String,
    pub target: String,
    pub up: bool,
}

/// Observe the state dir and the live host.
pub fn status_of(state: &StateDir, netns: Option<&str>) -> Result<Status> {
    let cur = state.current()?;
    let prev = state.previous()?;
    let mut st = Status {
        state_dir: state.path.display().to_string(),
        applied: cur.is_some(),
        generation: None,
        commit: None,
        host: None,
        applied_at: None,
        source: None,
        rules_per_backend: BTreeMap::new(),
        nft_rules: 0,
        drift: false,
        drift_details: vec![],
        previous_generation: prev.as_ref().map(|p| p.name.clone()),
        previous_commit: prev.as_ref().and_then(|p| p.meta.commit.clone()),
        pending_confirm: state.pending_confirm()?,
        counters: vec![],
        target_health: vec![],
        agent: crate::state::agent_journal::read_agent_view(&state.path),
        per_source: vec![],
        valid_until: cur.as_ref().and_then(|g| g.artifacts.manifest.valid_until.clone()),
        quotas: vec![],
    };
    let mut nft = NftBackend::new(netns.map(str::to_string)).with_cache_dir(state.path.join(state::CACHE_DIR));
    match &cur {
        Some(g) => {
            st.generation = Some(g.name.clone());
            st.commit = g.meta.commit.clone();
            st.host = Some(g.meta.host.clone());
            st.applied_at = Some(g.meta.applied_at.clone());
            st.source = Some(g.meta.source.clone());
            for r in &g.artifacts.manifest.rules {
                for b in &r.backends {
                    *st.rules_per_backend.entry(b.as_str().to_string()).or_default() += 1;
                }
            }
            // The skeleton: a big set's elements are not parsed to count rules.
            st.nft_rules = crate::backend::nft::lazy::skeleton(&g.artifacts.nftables)
                .get("nftables")
                .and_then(|v| v.as_array())
                .map(|a| a.iter().filter(|o| o.get("rule").is_some() || o.get("add").and_then(|x| x.get("rule")).is_some()).count())
                .unwrap_or(0);
            // A full listing (the per-source fill needs the dynamic sets' elements), compared
            // by the same code as `fwc plan`'s drift check, so both report the same drift.
            let obs = nft.observe(&g.artifacts)?;
            st.drift_details = crate::backend::sources::locate(obs.drift, &g.artifacts.manifest);
            st.counters = obs.counters;
            st.per_source = obs.per_source;
            let other = observe::besides_nft(netns, &state.path, &g.artifacts);
            st.drift_details.extend(crate::backend::sources::locate(other.drift, &g.artifacts.manifest));
            st.counters.extend(other.counters);
            // Quotas: read the counts, reset quotas whose period is over, persist.
            // A failure here (nft cannot list the quotas) does not hide the rest of the status.
            st.quotas = crate::quota::sync(&nft.cmd, &state.path, &g.artifacts.manifest.setup.quotas, crate::quota::now())
                .unwrap_or_else(|e| {
                    tracing::warn!("quota: {e}");
                    Vec::new()
                });
            st.target_health = other.target_health.into_iter().map(|(rule, target, up)| TargetHealth { rule, target, up }).collect();
            st.per_source.extend(other.per_source);
        }
        None => {
            // Whether it exists: the terse listing (no elements) says so.
            if nft.cmd.list_terse()?.is_some() {
                st.drift_details.push("table inet fwc exists but fwc has no applied state in this state dir".into());
            }
            st.drift_details.extend(observe::besides_nft(netns, &state.path, &transaction::empty_artifacts("-")).drift);
        }
    }
    st.drift = !st.drift_details.is_empty();
    Ok(st)
}
