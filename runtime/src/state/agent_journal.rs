//! What the agent's journal (`agent.json` in the state dir) tells others: the commit the agent
//! last finished with and its view of the fleet rollout. The agent writes the whole journal
//! (`crate::agent`); `fwc status` reads these parts of it here, below the agent.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// File of the agent's intent journal in the state dir.
pub const JOURNAL_FILE: &str = "agent.json";

/// The agent's view of the fleet rollout, as of its last reconcile (in `agent.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FollowStatus {
    /// The rollout's phase (`progressing`, `halted`, ...) or `none` (no state on the rollout
    /// ref yet), `unverified` (a state the agent does not trust).
    pub phase: String,
    pub commit: Option<String>,
    pub stable: Option<String>,
    /// This host's wave: index and name.
    pub wave: Option<(usize, String)>,
    /// The commit the agent goes to (None: it keeps what it has).
    pub target: Option<String>,
    /// Why the host is not on the rollout's commit (`not_promoted`, `halted`, `paused`,
    /// `stopped`, `unverified_state`).
    pub held: Option<String>,
    /// The state's reason, or why it is not trusted.
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handled {
    pub commit: String,
    /// `applied`, `refused`, `failed` or `self_check` (applied, then reverted by its
    /// self-check; final like a refusal).
    pub outcome: String,
    pub reason: Option<String>,
    /// The `reason` of `fwc_agent_degraded` for a commit not applied (`refused`,
    /// `apply_failed`, `rolled_back`, `self_check`), kept across adopts and restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded: Option<String>,
    /// The generation of the rollout state this host had accepted when this happened (a
    /// commit reverted by its self-check is tried again once the rollout is resumed after it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_generation: Option<u64>,
}

/// The parts of the journal `fwc status` shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentView {
    pub handled: Option<Handled>,
    #[serde(default)]
    pub rollout: Option<FollowStatus>,
}

/// The agent's view in `state_dir`, if it has a journal that reads.
pub fn read_agent_view(state_dir: &Path) -> Option<AgentView> {
    let text = std::fs::read_to_string(state_dir.join(JOURNAL_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}
