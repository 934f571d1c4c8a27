//! `agent.json`: the agent's intent journal (the action in progress and its audit seq, the
//! last commit handled and how, the rollout it follows and the last state it accepted).

use std::path::Path;

use miette::{IntoDiagnostic, Result, WrapErr};
use serde::{Deserialize, Serialize};

use crate::audit::Action;

/// File of the agent's intent journal in the state dir.
pub const JOURNAL_FILE: &str = "agent.json";

/// `agent.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Journal {
    /// An action that started and whose audit entry (`seq`) may not be written yet.
    pub pending: Option<Pending>,
    /// The newest commit the agent finished with, and how.
    pub handled: Option<Handled>,
    /// The fleet rollout the agent follows, and why it holds back (`fwc status` shows it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<FollowStatus>,
    /// The last rollout state this host accepted: a later one must succeed it
    /// ([`crate::rollout::follow::succession`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_state: Option<crate::rollout::follow::Accepted>,
}

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
pub struct Pending {
    pub seq: u64,
    pub commit: Option<String>,
    pub action: Action,
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

impl Journal {
    pub(super) fn load(dir: &Path) -> Result<Journal> {
        let p = dir.join(JOURNAL_FILE);
        match std::fs::read_to_string(&p) {
            Ok(t) => serde_json::from_str(&t).into_diagnostic().wrap_err_with(|| format!("corrupt {}", p.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Journal::default()),
            Err(e) => Err(e).into_diagnostic(),
        }
    }

    pub(super) fn save(&self, dir: &Path) -> Result<()> {
        crate::state::write_atomic(&dir.join(JOURNAL_FILE), fwc_compiler::artifacts::to_pretty(self).as_bytes())
    }
}

/// The agent's journal in `state_dir`, if it has one (for `fwc status`).
pub fn read_journal(state_dir: &Path) -> Option<Journal> {
    state_dir.join(JOURNAL_FILE).exists().then(|| Journal::load(state_dir).ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_round_trip() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(Journal::load(d.path()).unwrap(), Journal::default());
        let j = Journal {
            pending: Some(Pending { seq: 3, commit: Some("abc".into()), action: Action::Apply }),
            handled: Some(Handled { commit: "abc".into(), outcome: "applied".into(), reason: None, degraded: None, state_generation: None }),
            rollout: None,
            accepted_state: Some(crate::rollout::follow::Accepted { commit: "def".into(), generation: 4 }),
        };
        j.save(d.path()).unwrap();
        assert_eq!(Journal::load(d.path()).unwrap(), j);
    }
}
