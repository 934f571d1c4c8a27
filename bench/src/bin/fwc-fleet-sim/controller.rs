//! The controller: one step of the real decision core and state-ref I/O, fed the agents'
//! reports directly (no Prometheus scrape delay).

use std::path::Path;
use std::time::SystemTime;

use fwc_compiler::artifacts::rollout::RolloutPhase;
use fwc_runtime::rollout::controller::{self, Command as Ctl, ControllerInput, Decision};
use fwc_runtime::rollout::rewind::{behind_the_fleet, AcceptedReport};
use fwc_runtime::rollout::state_ref::{Pushed, Remote};

use crate::agent::Shared;
use crate::repo::git;

/// One controller step (`fwc rollout advance`, without Prometheus): decide and push.
pub(crate) fn advance(url: &str, sh: &Shared) -> Option<String> {
    step(url, sh, Ctl::Advance)
}

/// One controller step with an operator's command.
pub(crate) fn step(url: &str, sh: &Shared, command: Ctl) -> Option<String> {
    let remote = Remote::open(url, "main", "fwc-rollout").ok()?;
    let snap = remote.fetch().ok()?;
    let tip = snap.tip.to_string();
    let reports = sh.reports.lock().unwrap().clone();
    let candidates = controller::policy_candidates(snap.state.as_ref(), &tip, &command);
    let fleet = fwc_runtime::rollout::advance::load_fleet(&remote, &candidates, &reports).ok()?;
    let state_commit = snap.state_commit.map(|c| c.to_string());
    let accepted: Vec<AcceptedReport> = sh.accepted.lock().unwrap().values().cloned().collect();
    if let Some(why) = behind_the_fleet(snap.state.as_ref(), state_commit.as_deref(), &accepted, "fwc-rollout") {
        let mut last = sh.refused.lock().unwrap();
        if last.as_deref() != Some(why.as_str()) {
            eprintln!("{:7.1}s controller refuses: {why}", sh.t0.elapsed().as_secs_f64());
            sh.event("controller", "", "refused_rewound");
        }
        *last = Some(why);
        return None;
    }
    *sh.refused.lock().unwrap() = None;
    let d = controller::decide(&ControllerInput {
        state: snap.state.as_ref(),
        state_commit: state_commit.as_deref(),
        branch: "main",
        tip: &tip,
        fleet: fleet.as_ref(),
        reports: &reports,
        gates: &[],
        command,
        now: SystemTime::now(),
    });
    match d {
        Decision::Transition { state, summary } => {
            let id = remote.write(snap.state_commit, &state, &summary, None).ok()?;
            match remote.push(id).ok()? {
                Pushed::Ok => {
                    // libgit2's local transport runs no hooks; a git server runs post-update
                    // on the controller's push.
                    if let Some(dir) = url.strip_prefix("file://") {
                        git(Path::new(dir), &["update-server-info"]);
                    }
                    if state.phase == RolloutPhase::Halted && state.rollback {
                        sh.event("controller", &state.commit, "fleet_rollback");
                    }
                    sh.event("controller", &state.commit, match state.phase {
                        RolloutPhase::Halted => "halt",
                        RolloutPhase::Complete => "complete",
                        _ => "promote",
                    });
                    Some(format!("{} {:?} {} ({})", state.phase.as_str(), state.promoted, summary, state.reason))
                }
                Pushed::Rejected(_) => None,
            }
        }
        _ => None,
    }
}
