//! `agent.json`: the agent's intent journal (the action in progress and its audit seq, the
//! last commit handled and how, the rollout it follows and the last state it accepted).

use std::path::Path;

use miette::{IntoDiagnostic, Result, WrapErr};
use serde::{Deserialize, Serialize};

use crate::audit::Action;
pub use crate::state::agent_journal::{FollowStatus, Handled, JOURNAL_FILE};

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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    pub seq: u64,
    pub commit: Option<String>,
    pub action: Action,
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
