//! The controller's own metrics, as Prometheus text: what one `fwc rollout advance` step saw and
//! did (`--textfile PATH` writes it for node-exporter's textfile collector, after every step of
//! `--watch` too). Pure: the caller passes the step's outcome and the time, and writes the file.
//!
//! - `fwc_rollout_controller_last_success_timestamp_seconds`: the end of the last step that
//!   decided (a transition, nothing to do, or a refusal); a step that failed (git, Prometheus)
//!   writes no file, so the value ages: `FwcRolloutControllerDown`.
//! - `fwc_rollout_controller_step{result}`: 1 for the last step's result.
//! - `fwc_rollout_controller_transitions{phase}`: 1 when the last step made a transition into
//!   `phase` (a counter would need memory across one-shot runs; Prometheus' `changes()` over the
//!   state's generation counts transitions).
//! - `fwc_rollout_state_generation`, `fwc_rollout_state_since_timestamp_seconds{phase}`: the
//!   state after the step and the time of its last transition: `FwcRolloutNotAdvancing`.
//! - `fwc_rollout_hosts{wave,state}`: the hosts of each wave by what they report (`applied` the
//!   rollout's commit, `waiting`, `degraded`, `missing`).
//! - `fwc_rollout_gate{wave,gate}`: 1 holds, 0 fails (gates evaluated in this step).

use std::collections::BTreeMap;
use std::fmt::Write;

use fwc_artifacts::rollout::RolloutState;

use super::controller::{Fleet, GateResult, HostReport};

/// What a step saw, for [`render`].
pub struct StepView<'a> {
    /// `transition`, `nothing` or `refused`.
    pub result: &'a str,
    /// The state after the step.
    pub state: Option<&'a RolloutState>,
    /// The state's `since` as Unix seconds (parsed by the caller).
    pub since: Option<f64>,
    pub fleet: Option<&'a Fleet>,
    pub reports: &'a BTreeMap<String, HostReport>,
    pub gates: &'a [GateResult],
    /// Unix seconds of the end of the step.
    pub now: f64,
}

/// How a host stands for the rollout of `commit`.
pub fn host_state(report: Option<&HostReport>, commit: &str) -> &'static str {
    match report {
        None => "missing",
        Some(r) if r.degraded.iter().any(|d| d.commit == commit) => "degraded",
        Some(r) if r.applied.as_deref() == Some(commit) => "applied",
        Some(_) => "waiting",
    }
}

fn esc(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The exposition text.
pub fn render(v: &StepView) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# HELP fwc_rollout_controller_last_success_timestamp_seconds End of the last controller step that decided.");
    let _ = writeln!(s, "# TYPE fwc_rollout_controller_last_success_timestamp_seconds gauge");
    let _ = writeln!(s, "fwc_rollout_controller_last_success_timestamp_seconds {}", v.now);
    let _ = writeln!(s, "# HELP fwc_rollout_controller_step The last step's result (1).");
    let _ = writeln!(s, "# TYPE fwc_rollout_controller_step gauge");
    for r in ["transition", "nothing", "refused"] {
        let _ = writeln!(s, "fwc_rollout_controller_step{{result=\"{r}\"}} {}", u8::from(r == v.result));
    }
    let Some(st) = v.state else { return s };
    let _ = writeln!(s, "# HELP fwc_rollout_controller_transitions Whether the last step made a transition into this phase.");
    let _ = writeln!(s, "# TYPE fwc_rollout_controller_transitions gauge");
    for p in ["progressing", "paused", "halted", "complete", "stopped"] {
        let _ = writeln!(s, "fwc_rollout_controller_transitions{{phase=\"{p}\"}} {}", u8::from(v.result == "transition" && st.phase.as_str() == p));
    }
    let _ = writeln!(s, "# HELP fwc_rollout_state_generation Generation of the rollout state.");
    let _ = writeln!(s, "# TYPE fwc_rollout_state_generation gauge");
    let _ = writeln!(s, "fwc_rollout_state_generation{{commit=\"{}\"}} {}", esc(&st.commit), st.generation);
    if let Some(since) = v.since {
        let _ = writeln!(s, "# HELP fwc_rollout_state_since_timestamp_seconds Time of the rollout state's last transition.");
        let _ = writeln!(s, "# TYPE fwc_rollout_state_since_timestamp_seconds gauge");
        let _ = writeln!(s, "fwc_rollout_state_since_timestamp_seconds{{commit=\"{}\",phase=\"{}\"}} {since}", esc(&st.commit), st.phase.as_str());
    }
    if let Some(f) = v.fleet {
        let mut by: BTreeMap<(usize, &str), usize> = BTreeMap::new();
        for (i, _) in f.policy.waves.iter().enumerate() {
            for state in ["applied", "waiting", "degraded", "missing"] {
                by.insert((i, state), 0);
            }
        }
        for m in &f.members {
            *by.entry((m.wave, host_state(v.reports.get(&m.name), &st.commit))).or_default() += 1;
        }
        let _ = writeln!(s, "# HELP fwc_rollout_hosts Hosts of each wave by what they report for the rollout's commit.");
        let _ = writeln!(s, "# TYPE fwc_rollout_hosts gauge");
        for ((w, state), n) in by {
            let name = f.policy.waves.get(w).map_or("?", |x| x.name.as_str());
            let _ = writeln!(s, "fwc_rollout_hosts{{wave=\"{}\",state=\"{state}\"}} {n}", esc(name));
        }
        if !v.gates.is_empty() {
            let _ = writeln!(s, "# HELP fwc_rollout_gate Gates evaluated in the last step: 1 holds, 0 fails.");
            let _ = writeln!(s, "# TYPE fwc_rollout_gate gauge");
            for g in v.gates {
                let name = f.policy.waves.get(g.wave).map_or("?", |x| x.name.as_str());
                let _ = writeln!(s, "fwc_rollout_gate{{wave=\"{}\",gate=\"{}\"}} {}", esc(name), esc(&g.gate), u8::from(g.failure.is_none()));
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::controller::{Degraded, Member};
    use fwc_artifacts::rollout::{MaxUnavailable, OnFailure, RolloutPhase, RolloutPolicy, Wave, WaveSelect};

    #[test]
    fn a_step_as_prometheus_text() {
        let wave = |name: &str| Wave { name: name.into(), select: WaveSelect::Rest, soak_secs: 0, max_unavailable: MaxUnavailable::Hosts(0), gates: vec![], max_parallel: None };
        let fleet = Fleet {
            policy: RolloutPolicy { waves: vec![wave("canary"), wave("all")], probes: vec![], windows: vec![], on_failure: OnFailure::Halt, missing_timeout_secs: 600, self_check_attempts: 3, self_check_spacing_ms: 1000 },
            members: ["c1", "a1", "a2", "a3"].iter().enumerate().map(|(i, n)| Member { name: n.to_string(), wave: usize::from(i > 0), declared: true }).collect(),
            policy_commit: "p".into(),
        };
        let state: RolloutState = serde_json::from_value(serde_json::json!({
            "version": 1, "branch": "main", "commit": "c2", "stable": "c1", "waves": ["canary", "all"], "promoted": 1,
            "phase": "halted", "reason": "r", "since": "2026-11-26T12:00:00Z", "generation": 9,
        }))
        .unwrap();
        let on = |c: &str| HostReport { applied: Some(c.into()), degraded: vec![], last_seen: None, current: true };
        let mut reports = BTreeMap::new();
        reports.insert("c1".to_string(), on("c2"));
        reports.insert("a1".to_string(), on("c1"));
        reports.insert("a2".to_string(), HostReport { degraded: vec![Degraded { commit: "c2".into(), reason: "self_check".into() }], ..on("c1") });
        let gates = [GateResult { wave: 0, gate: "errors".into(), failure: Some("3".into()), ..Default::default() }];
        let text = render(&StepView { result: "transition", state: Some(&state), since: Some(1.5e9), fleet: Some(&fleet), reports: &reports, gates: &gates, now: 1.6e9 });
        for want in [
            "fwc_rollout_controller_last_success_timestamp_seconds 1600000000\n",
            "fwc_rollout_controller_step{result=\"transition\"} 1\n",
            "fwc_rollout_controller_step{result=\"nothing\"} 0\n",
            "fwc_rollout_controller_transitions{phase=\"halted\"} 1\n",
            "fwc_rollout_controller_transitions{phase=\"progressing\"} 0\n",
            "fwc_rollout_state_generation{commit=\"c2\"} 9\n",
            "fwc_rollout_state_since_timestamp_seconds{commit=\"c2\",phase=\"halted\"} 1500000000\n",
            "fwc_rollout_hosts{wave=\"canary\",state=\"applied\"} 1\n",
            "fwc_rollout_hosts{wave=\"all\",state=\"waiting\"} 1\n",
            "fwc_rollout_hosts{wave=\"all\",state=\"degraded\"} 1\n",
            "fwc_rollout_hosts{wave=\"all\",state=\"missing\"} 1\n",
            "fwc_rollout_hosts{wave=\"canary\",state=\"missing\"} 0\n",
            "fwc_rollout_gate{wave=\"canary\",gate=\"errors\"} 0\n",
        ] {
            assert!(text.contains(want), "{want}in\n{text}");
        }
        assert_eq!(RolloutPhase::Halted.as_str(), "halted");
        // Without a state: only the step.
        let text = render(&StepView { result: "nothing", state: None, since: None, fleet: None, reports: &reports, gates: &[], now: 1.0 });
        assert!(text.contains("fwc_rollout_controller_step{result=\"nothing\"} 1") && !text.contains("fwc_rollout_hosts"), "{text}");
    }
}
