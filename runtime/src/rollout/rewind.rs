//! The controller's check that the rollout ref was not set back behind the fleet.
//!
//! Agents accept a rollout state only when it descends from the last one each accepted, with a
//! higher generation ([`super::follow::succession`]); a replayed or restored-from-backup state
//! moves no host. But the controller is stateless: it reads the state at the ref and builds the
//! next one on it. Built on a state older than what the hosts accepted, every state it writes
//! is refused by every agent (held `state_rewound`), and the rollout is wedged while looking
//! alive. So before deciding, the controller compares the ref's state with the newest state the
//! hosts report having accepted (`fwc_rollout_accepted_state{host,state}` = its generation)
//! and refuses to build on an older one, saying which state to restore.
//!
//! Pure: the reports come in, a verdict goes out.

use fwc_artifacts::rollout::RolloutState;

/// One host's report of the last rollout state it accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptedReport {
    pub host: String,
    /// The state commit.
    pub state: String,
    pub generation: u64,
}

/// None: the ref's state is at or ahead of everything the hosts accepted (or no host accepted
/// one yet). Some(why): the ref was set back or deleted; `why` names the newest accepted state,
/// the hosts that hold it and how to restore it.
pub fn behind_the_fleet(state: Option<&RolloutState>, state_commit: Option<&str>, accepted: &[AcceptedReport], rollout_branch: &str) -> Option<String> {
    let newest = accepted.iter().max_by(|a, b| a.generation.cmp(&b.generation).then_with(|| b.host.cmp(&a.host)))?;
    let short = |c: &str| c[..c.len().min(12)].to_string();
    let hosts: Vec<&str> = accepted.iter().filter(|a| a.state == newest.state).map(|a| a.host.as_str()).collect();
    let named = if hosts.len() > 3 { format!("{} and {} more", hosts[..3].join(", "), hosts.len() - 3) } else { hosts.join(", ") };
    let restore = format!(
        "restore it: `git push --force origin {}:refs/heads/{rollout_branch}` (the commit is in the hosts' mirrors if the server no longer has it), then run the controller again",
        newest.state
    );
    match (state, state_commit) {
        (Some(s), Some(c)) if c == newest.state || s.generation >= newest.generation => None,
        (Some(s), Some(c)) => Some(format!(
            "the rollout ref holds state {} of generation {}, older than state {} of generation {} that {named} accepted: the ref was set back (a replayed or restored state). Every state built on it would be refused by the hosts (held `state_rewound`); nothing was decided. {restore}",
            short(c),
            s.generation,
            short(&newest.state),
            newest.generation
        )),
        _ => Some(format!(
            "the rollout ref is gone, but {named} accepted state {} of generation {}: a new rollout from nothing would be refused by the hosts (held `state_missing`/`state_rewound`); nothing was decided. {restore}",
            short(&newest.state),
            newest.generation
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fwc_artifacts::rollout::{RolloutPhase, ROLLOUT_STATE_VERSION};

    fn state(generation: u64) -> RolloutState {
        RolloutState {
            version: ROLLOUT_STATE_VERSION,
            branch: "main".into(),
            commit: "c".repeat(40),
            stable: None,
            waves: vec!["all".into()],
            promoted: Some(0),
            phase: RolloutPhase::Progressing,
            rollback: false,
            reason: String::new(),
            since: String::new(),
            promoted_at: None,
            generation,
            predecessor: None,
            policy_commit: None,
            batch_below: None,
            resumed: None,
        }
    }

    fn rep(host: &str, state: &str, generation: u64) -> AcceptedReport {
        AcceptedReport { host: host.into(), state: state.repeat(40), generation }
    }

    #[test]
    fn the_ref_set_back_or_deleted_behind_what_hosts_accepted_is_refused() {
        let fleet = [rep("a", "7", 7), rep("b", "7", 7), rep("c", "6", 6)];
        let s = |g| state(g);
        let rows: Vec<(Option<RolloutState>, Option<String>, &[AcceptedReport], Option<&str>)> = vec![
            // no host accepted anything yet: a first rollout
            (None, None, &[], None),
            (Some(s(1)), Some("1".repeat(40)), &[], None),
            // the ref at the newest accepted state, or ahead of it (the controller's own step)
            (Some(s(7)), Some("7".repeat(40)), &fleet, None),
            (Some(s(8)), Some("8".repeat(40)), &fleet, None),
            // set back to an older state: refused, naming the state to restore and who holds it
            (Some(s(3)), Some("3".repeat(40)), &fleet, Some("older than state 777777777777 of generation 7 that a, b accepted")),
            // states written before generations (0) behind a fleet that accepted generation 7
            (Some(s(0)), Some("0".repeat(40)), &fleet, Some("generation 0")),
            // the ref deleted
            (None, None, &fleet, Some("the rollout ref is gone, but a, b accepted state 777777777777")),
        ];
        for (n, (st, c, acc, want)) in rows.into_iter().enumerate() {
            let got = behind_the_fleet(st.as_ref(), c.as_deref(), acc, "fwc-rollout");
            match (&got, want) {
                (None, None) => {}
                (Some(g), Some(w)) if g.contains(w) && g.contains("git push --force origin 7777777777777777777777777777777777777777:refs/heads/fwc-rollout") => {}
                _ => panic!("row {n}: {got:?}, want {want:?}"),
            }
        }
    }
}
