//! Table tests of the controller's decisions: every transition, promotion windows, batches,
//! generations, the policy in force and the gates.

use super::*;
use fwc_artifacts::rollout::{Wave, WaveSelect, Window};

const C1: &str = "1111111111111111111111111111111111111111";
const C2: &str = "2222222222222222222222222222222222222222";
const T0: u64 = 1_800_000_000;

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(T0 + secs)
}

fn wave(name: &str, soak: u64, max_unavailable: u32) -> Wave {
    Wave { name: name.into(), select: WaveSelect::Rest, soak_secs: soak, max_unavailable: MaxUnavailable::Hosts(max_unavailable), gates: vec![], max_parallel: None }
}

/// canary (c1), early (e1, e2; one may be missing), all (a1, a2, a3).
fn fleet() -> Fleet {
    fleet_with(vec![])
}

fn fleet_with(windows: Vec<Window>) -> Fleet {
    let mut members = vec![];
    for (w, names) in [(0, &["c1"][..]), (1, &["e1", "e2"]), (2, &["a1", "a2", "a3"])] {
        members.extend(names.iter().map(|n| Member { name: n.to_string(), wave: w, declared: true }));
    }
    Fleet {
        policy: RolloutPolicy {
            waves: vec![wave("canary", 60, 0), wave("early", 0, 1), wave("all", 0, 0)],
            probes: vec![],
            windows,
            on_failure: OnFailure::Rollback,
            missing_timeout_secs: 600,
            self_check_attempts: 3,
            self_check_spacing_ms: 1000,
        },
        members,
        policy_commit: C1.into(),
    }
}

fn state(commit: &str, promoted: usize, phase: RolloutPhase, promoted_at: u64) -> RolloutState {
    RolloutState {
        version: 1,
        branch: "main".into(),
        commit: commit.into(),
        stable: Some(C1.into()),
        waves: vec!["canary".into(), "early".into(), "all".into()],
        promoted: Some(promoted),
        phase,
        rollback: false,
        reason: "r".into(),
        since: rfc3339(at(promoted_at)),
        promoted_at: Some(rfc3339(at(promoted_at))),
        generation: 7,
        predecessor: None,
        policy_commit: None,
        batch_below: None,
        resumed: None,
    }
}

/// `s` with its wave seen fully applied at `t` (after the promotion: the soak started).
fn soaking(mut s: RolloutState, t: u64) -> RolloutState {
    s.since = rfc3339(at(t));
    assert_ne!(Some(&s.since), s.promoted_at.as_ref(), "the soak starts after the promotion");
    s
}

fn missing_paused() -> RolloutState {
    let mut s = state(C2, 1, Paused, 60);
    s.reason = format!("{MISSING_PAUSE}wave early: 2 host(s) not reporting");
    s.since = rfc3339(at(660));
    s
}

fn first_rollout() -> RolloutState {
    let mut s = state(C2, 1, Progressing, 0);
    s.stable = None;
    s
}

fn soak_started_at_promotion() -> RolloutState {
    let mut s = state(C2, 0, Progressing, 0);
    s.reason = format!("wave canary applied and healthy on every host{SOAKING}60s before early is promoted");
    s
}

fn on(commit: &str) -> HostReport {
    HostReport { applied: Some(commit.into()), degraded: vec![], last_seen: Some(0.0), current: true }
}

fn degraded(applied: &str, for_commit: &str, reason: &str) -> HostReport {
    HostReport { applied: Some(applied.into()), degraded: vec![Degraded { commit: for_commit.into(), reason: reason.into() }], last_seen: Some(0.0), current: true }
}

/// Every host of the fleet reports `commit`, except the listed overrides (None = missing).
fn reports(commit: &str, overrides: &[(&str, Option<HostReport>)]) -> BTreeMap<String, HostReport> {
    let mut m: BTreeMap<String, HostReport> = fleet().members.iter().map(|h| (h.name.clone(), on(commit))).collect();
    for (h, r) in overrides {
        match r {
            Some(r) => m.insert(h.to_string(), r.clone()),
            None => m.remove(*h),
        };
    }
    m
}

struct Case {
    name: &'static str,
    state: Option<RolloutState>,
    tip: &'static str,
    reports: BTreeMap<String, HostReport>,
    gates: Vec<GateResult>,
    command: Command,
    now: u64,
    /// Expected: Ok((phase, promoted, rollback, reason contains)) for a transition,
    /// Err(why contains) for nothing / refused.
    want: Result<(RolloutPhase, Option<usize>, bool, &'static str), &'static str>,
}

fn case(name: &'static str, state: Option<RolloutState>, tip: &'static str, reports: BTreeMap<String, HostReport>, command: Command, now: u64) -> Case {
    Case { name, state, tip, reports, gates: vec![], command, now, want: Err("") }
}

impl Case {
    fn want(mut self, phase: RolloutPhase, promoted: usize, rollback: bool, reason: &'static str) -> Case {
        self.want = Ok((phase, Some(promoted), rollback, reason));
        self
    }
    fn nothing(mut self, why: &'static str) -> Case {
        self.want = Err(why);
        self
    }
    fn gate(mut self, wave: usize, failure: Option<&str>) -> Case {
        self.gates.push(GateResult { wave, gate: "errors".into(), failure: failure.map(String::from), ..Default::default() });
        self
    }
    /// A gate of `wave` without an answer (its query failed or returned nothing), with `grace_secs`.
    fn silent_gate(mut self, wave: usize, grace_secs: u64) -> Case {
        self.gates.push(GateResult { wave, gate: "errors".into(), failure: Some("gate \"errors\": the query failed: bad_data".into()), no_answer: true, grace_secs });
        self
    }
}

use RolloutPhase::*;

fn cases() -> Vec<Case> {
    let fl = || reports(C1, &[]);
    let c2_canary = || reports(C1, &[("c1", Some(on(C2)))]);
    let c2_early = || reports(C1, &[("c1", Some(on(C2))), ("e1", Some(on(C2))), ("e2", Some(on(C2)))]);
    vec![
        case("no state: the tip starts a rollout", None, C2, fl(), Command::Advance, 0).want(Progressing, 0, false, "new tip of main"),
        case("complete, new tip: a new rollout", Some(state(C1, 2, Complete, 0)), C2, fl(), Command::Advance, 10).want(Progressing, 0, false, "was complete"),
        case("halted, new tip (a fix): a new rollout", Some(state(C1, 0, Halted, 0)), C2, fl(), Command::Advance, 10).want(Progressing, 0, false, "was halted"),
        case("stopped, new tip: a new rollout", Some(state(C1, 1, Stopped, 0)), C2, fl(), Command::Advance, 10).want(Progressing, 0, false, "was stopped"),
        case("progressing, new tip: the current rollout continues", Some(state(C2, 0, Progressing, 0)), "3333333333333333333333333333333333333333", reports(C1, &[]), Command::Advance, 10)
            .nothing("waiting for 1 host(s)"),
        case("canary not applied yet: wait for hosts", Some(state(C2, 0, Progressing, 0)), C2, fl(), Command::Advance, 100).nothing("waiting for 1 host(s) to apply 222222222222: c1"),
        case("canary seen applied: the soak starts (a transition)", Some(state(C2, 0, Progressing, 0)), C2, c2_canary(), Command::Advance, 30).want(Progressing, 0, false, "soaking 60s"),
        case("the soak started in the second of the promotion: soaking, not started twice", Some(soak_started_at_promotion()), C2, c2_canary(), Command::Advance, 0).nothing("soaking: 0s of 60s"),
        case("canary soaking, not over: wait", Some(soaking(state(C2, 0, Progressing, 0), 30)), C2, c2_canary(), Command::Advance, 80).nothing("soaking: 50s of 60s"),
        case("canary applied and soaked: promote early", Some(soaking(state(C2, 0, Progressing, 0), 30)), C2, c2_canary(), Command::Advance, 90).want(Progressing, 1, false, "early promoted"),
        case("soaking, a host falls behind: wait for it", Some(soaking(state(C2, 0, Progressing, 0), 30)), C2, fl(), Command::Advance, 90).nothing("waiting for 1 host(s)"),
        case("a later wave's hosts may lag before their promotion", Some(state(C2, 1, Progressing, 60)), C2, c2_canary(), Command::Advance, 70).nothing("waiting for 2 host(s)"),
        case("degraded canary for this commit: halt with rollback", Some(state(C2, 0, Progressing, 0)), C2, reports(C1, &[("c1", Some(degraded(C1, C2, "apply_failed")))]), Command::Advance, 5)
            .want(Halted, 0, true, "c1 (apply_failed)"),
        case("degraded for an older commit: no halt", Some(soaking(state(C2, 0, Progressing, 0), 1)), C2, reports(C1, &[("c1", Some(degraded(C2, C1, "rolled_back")))]), Command::Advance, 61)
            .want(Progressing, 1, false, "early promoted"),
        case("degraded while paused: still halts", Some(state(C2, 0, Paused, 0)), C2, reports(C1, &[("c1", Some(degraded(C1, C2, "self_check")))]), Command::Advance, 5)
            .want(Halted, 0, true, "self_check"),
        case("a failing gate of an applied wave: halt", Some(state(C2, 0, Progressing, 0)), C2, c2_canary(), Command::Advance, 60)
            .gate(0, Some("gate \"errors\" fails: 3"))
            .want(Halted, 0, true, "errors"),
        case("a holding gate: promote", Some(soaking(state(C2, 0, Progressing, 0), 1)), C2, c2_canary(), Command::Advance, 61).gate(0, None).want(Progressing, 1, false, "early promoted"),
        case("the last wave's gates are never checked: complete", Some(state(C2, 2, Progressing, 60)), C2, reports(C2, &[]), Command::Advance, 70)
            .gate(2, Some("fails"))
            .want(Complete, 2, false, "is stable"),
        case("an earlier wave's gate regressing during a later wave: halt", Some(state(C2, 2, Progressing, 60)), C2, reports(C2, &[]), Command::Advance, 70)
            .gate(0, Some("gate \"errors\" fails: 9"))
            .want(Halted, 2, true, "wave canary: gate"),
        case("a failing gate of a wave still applying: wait", Some(state(C2, 0, Progressing, 0)), C2, fl(), Command::Advance, 60).gate(0, Some("fails")).nothing("waiting"),
        case("one early host missing, one allowed: promote", Some(state(C2, 1, Progressing, 60)), C2, reports(C1, &[("c1", Some(on(C2))), ("e1", Some(on(C2))), ("e2", None)]), Command::Advance, 70)
            .want(Progressing, 2, false, "all promoted"),
        case("the canary between scrapes (grace period): wait, no halt", Some(state(C2, 0, Progressing, 0)), C2, reports(C1, &[("c1", Some(HostReport::default()))]), Command::Advance, 5)
            .nothing("waiting for 1 host(s)"),
        case("the canary missing, none allowed: wait for it, never halt", Some(state(C2, 0, Progressing, 0)), C2, reports(C1, &[("c1", None)]), Command::Advance, 5)
            .nothing("not reporting, 0 allowed (max-unavailable): c1; waiting for them (5s of 600s"),
        case("two early hosts missing, one allowed: wait", Some(state(C2, 1, Progressing, 60)), C2, reports(C1, &[("c1", Some(on(C2))), ("e1", None), ("e2", None)]), Command::Advance, 70)
            .nothing("2 host(s) not reporting, 1 allowed"),
        case("missing past missing-timeout: pause, naming them", Some(state(C2, 1, Progressing, 60)), C2, reports(C1, &[("c1", Some(on(C2))), ("e1", None), ("e2", None)]), Command::Advance, 660)
            .want(Paused, 1, false, "missing hosts: wave early: 2 host(s) not reporting, 1 allowed (max-unavailable): e1, e2, for more than 10m"),
        case("paused for missing hosts, still missing: nothing", Some(missing_paused()), C2, reports(C1, &[("c1", Some(on(C2))), ("e1", None), ("e2", None)]), Command::Advance, 900)
            .nothing("paused"),
        case("paused for missing hosts, back: the rollout goes on", Some(missing_paused()), C2, reports(C1, &[("c1", Some(on(C2))), ("e1", Some(on(C1)))]), Command::Advance, 900)
            .want(Progressing, 1, false, "report again"),
        case("paused for missing hosts, a degraded host: halt", Some(missing_paused()), C2, reports(C1, &[("c1", Some(degraded(C1, C2, "self_check"))), ("e1", None), ("e2", None)]), Command::Advance, 900)
            .want(Halted, 1, true, "self_check"),
        case("a host of a finished wave missing (a reboot): the next wave goes on", Some(state(C2, 2, Progressing, 60)), C2, reports(C2, &[("c1", None)]), Command::Advance, 70)
            .want(Complete, 2, false, "is stable"),
        case("a host of a finished wave missing for hours: never a halt", Some(state(C2, 1, Progressing, 60)), C2, reports(C1, &[("c1", None), ("e1", None), ("e2", Some(on(C2)))]), Command::Advance, 99_999)
            .want(Progressing, 2, false, "all promoted"),
        case("halt --rollback on a first rollout: refused, no stable commit", Some(first_rollout()), C2, c2_early(), Command::Halt { rollback: true, reason: String::new() }, 5)
            .nothing("no stable commit to return to"),
        case("halt on a first rollout: fine", Some(first_rollout()), C2, c2_early(), Command::Halt { rollback: false, reason: String::new() }, 5).want(Halted, 1, false, "halt by the operator"),
        case("missing hosts of unpromoted waves do not count", Some(soaking(state(C2, 0, Progressing, 0), 1)), C2, reports(C1, &[("c1", Some(on(C2))), ("a1", None), ("a2", None)]), Command::Advance, 61)
            .want(Progressing, 1, false, "early promoted"),
        case("the last wave applied: complete, stable", Some(state(C2, 2, Progressing, 60)), C2, reports(C2, &[]), Command::Advance, 70).want(Complete, 2, false, "is stable"),
        case("complete, same tip: nothing", Some(state(C2, 2, Complete, 60)), C2, reports(C2, &[]), Command::Advance, 70).nothing("rolled out to every wave"),
        case("halted, same tip: nothing", Some(state(C2, 0, Halted, 60)), C2, reports(C2, &[]), Command::Advance, 70).nothing("is halted"),
        case("stopped, same tip: nothing", Some(state(C2, 0, Stopped, 60)), C2, reports(C2, &[]), Command::Advance, 70).nothing("was stopped"),
        case("paused: no promotion", Some(state(C2, 0, Paused, 0)), C2, c2_canary(), Command::Advance, 100).nothing("paused"),
        case("pause", Some(state(C2, 0, Progressing, 0)), C2, fl(), Command::Pause { reason: "lunch".into() }, 5).want(Paused, 0, false, "pause by the operator: lunch"),
        case("pause twice", Some(state(C2, 0, Paused, 0)), C2, fl(), Command::Pause { reason: String::new() }, 5).nothing("already paused"),
        case("resume a paused rollout", Some(state(C2, 0, Paused, 0)), C2, fl(), Command::Resume { reason: String::new() }, 5).want(Progressing, 0, false, "resume by the operator"),
        case("resume a halted rollout", Some(state(C2, 0, Halted, 0)), C2, fl(), Command::Resume { reason: "false alarm".into() }, 5).want(Progressing, 0, false, "false alarm"),
        case("resume a complete rollout: refused", Some(state(C2, 2, Complete, 0)), C2, fl(), Command::Resume { reason: String::new() }, 5).nothing("cannot resume"),
        case("halt without rollback", Some(state(C2, 1, Progressing, 0)), C2, c2_early(), Command::Halt { rollback: false, reason: "look".into() }, 5).want(Halted, 1, false, "halt by the operator: look"),
        case("halt --rollback", Some(state(C2, 1, Progressing, 0)), C2, c2_early(), Command::Halt { rollback: true, reason: String::new() }, 5).want(Halted, 1, true, "halt --rollback by the operator"),
        case("halt --rollback after a plain halt", Some(state(C2, 1, Halted, 0)), C2, c2_early(), Command::Halt { rollback: true, reason: String::new() }, 5).want(Halted, 1, true, "halt --rollback"),
        case("halt a complete rollout: refused", Some(state(C2, 2, Complete, 0)), C2, fl(), Command::Halt { rollback: true, reason: String::new() }, 5).nothing("cannot halt"),
        case("stop during a wave", Some(state(C2, 1, Progressing, 0)), C2, c2_early(), Command::Stop { reason: "enough".into() }, 5).want(Stopped, 1, false, "stop by the operator: enough"),
        case("stop twice", Some(state(C2, 1, Stopped, 0)), C2, c2_early(), Command::Stop { reason: String::new() }, 5).nothing("already stopped"),
        case("start an older commit while complete", Some(state(C2, 2, Complete, 0)), C2, fl(), Command::Start { commit: C1.into() }, 5).want(Progressing, 0, false, "started by the operator"),
        case("start the commit being rolled out: nothing", Some(state(C2, 1, Progressing, 0)), C2, fl(), Command::Start { commit: C2.into() }, 5).nothing("already being rolled out"),
        case("start the halted commit again: restart", Some(state(C2, 1, Halted, 0)), C2, fl(), Command::Start { commit: C2.into() }, 5).want(Progressing, 0, false, "started by the operator"),
        case("pause without a rollout: refused", None, C2, fl(), Command::Pause { reason: String::new() }, 5).nothing("no rollout yet"),
    ]
}

#[test]
fn every_transition() {
    run(&fleet(), cases());
}

fn win(allow: bool, days: &[u8], start: u16, end: u16, offset_min: i16) -> Window {
    Window { allow, window: fwc_artifacts::window::DayWindow { days: days.to_vec(), start_min: start, end_min: end }, offset_min, tz: None }
}

/// T0 is Friday 2027-01-15 08:00 UTC.
#[test]
fn promotion_windows() {
    // window allow="Mon-Fri 09:00-17:00" tz="UTC"; window deny="Fri 15:00-24:00"
    let office = fleet_with(vec![win(true, &[0, 1, 2, 3, 4], 9 * 60, 17 * 60, 0), win(false, &[4], 15 * 60, 1440, 0)]);
    let c2_canary = || reports(C1, &[("c1", Some(on(C2)))]);
    let soaked = || Some(soaking(state(C2, 0, Progressing, 0), 30));
    const H: u64 = 3600;
    run(&office, vec![
        case("inside the allow window: promote", soaked(), C2, c2_canary(), Command::Advance, H).want(Progressing, 1, false, "early promoted"),
        case("outside the allow window: wait, and say when it opens", soaked(), C2, c2_canary(), Command::Advance, 100)
            .nothing("waiting: outside the promotion windows (next opens 2027-01-15T09:00:00Z) to promote early"),
        case("inside the deny window: wait until Monday", soaked(), C2, c2_canary(), Command::Advance, 7 * H)
            .nothing("outside the promotion windows (next opens 2027-01-18T09:00:00Z)"),
        case("a new tip outside the windows: the start (wave 0) waits", Some(state(C1, 2, Complete, 0)), C2, reports(C1, &[]), Command::Advance, 100)
            .nothing("outside the promotion windows"),
        case("a new tip inside the windows: start", Some(state(C1, 2, Complete, 0)), C2, reports(C1, &[]), Command::Advance, H).want(Progressing, 0, false, "was complete"),
        case("the operator's start is never blocked", Some(state(C1, 2, Complete, 0)), C2, reports(C1, &[]), Command::Start { commit: C2.into() }, 100)
            .want(Progressing, 0, false, "started by the operator"),
        case("a degraded canary halts outside the windows", Some(state(C2, 0, Progressing, 0)), C2, reports(C1, &[("c1", Some(degraded(C1, C2, "apply_failed")))]), Command::Advance, 100)
            .want(Halted, 0, true, "c1 (apply_failed)"),
        case("a degraded canary halts inside the deny window", Some(state(C2, 0, Progressing, 0)), C2, reports(C1, &[("c1", Some(degraded(C1, C2, "apply_failed")))]), Command::Advance, 8 * H)
            .want(Halted, 0, true, "c1 (apply_failed)"),
        case("pause outside the windows", Some(state(C2, 0, Progressing, 0)), C2, c2_canary(), Command::Pause { reason: String::new() }, 100).want(Paused, 0, false, "pause"),
        case("halt --rollback outside the windows", Some(state(C2, 1, Progressing, 0)), C2, c2_canary(), Command::Halt { rollback: true, reason: String::new() }, 100)
            .want(Halted, 1, true, "halt --rollback"),
        case("stop outside the windows", Some(state(C2, 1, Progressing, 0)), C2, c2_canary(), Command::Stop { reason: String::new() }, 100).want(Stopped, 1, false, "stop"),
        case("the soak starts outside the windows (not a promotion)", Some(state(C2, 0, Progressing, 0)), C2, c2_canary(), Command::Advance, 30).want(Progressing, 0, false, "soaking 60s"),
        case("the last wave applied outside the windows: complete (not a promotion)", Some(state(C2, 2, Progressing, 60)), C2, reports(C2, &[]), Command::Advance, 100)
            .want(Complete, 2, false, "is stable"),
    ]);
    // window allow="Thu 23:00-24:00" tz="-09:00": Friday 08:00-09:00 UTC (another day in UTC).
    let west = fleet_with(vec![win(true, &[3], 23 * 60, 1440, -9 * 60)]);
    run(&west, vec![
        case("a window across a fixed offset: open at Thu 23:30 local = Fri 08:30 UTC", soaked(), C2, c2_canary(), Command::Advance, H / 2).want(Progressing, 1, false, "early promoted"),
        case("a window across a fixed offset: closed at Fri 00:00 local = 09:00 UTC", soaked(), C2, c2_canary(), Command::Advance, H)
            .nothing("next opens 2027-01-22T08:00:00Z"),
    ]);
}

fn run(f: &Fleet, cases: Vec<Case>) {
    let mut failures = vec![];
    for c in cases {
        let inp = ControllerInput {
            state: c.state.as_ref(),
            state_commit: Some("5555555555555555555555555555555555555555"),
            branch: "main",
            tip: c.tip,
            fleet: Some(f),
            reports: &c.reports,
            gates: &c.gates,
            command: c.command.clone(),
            now: at(c.now),
        };
        let d = decide(&inp);
        let ok = match (&c.want, &d) {
            (Ok((phase, promoted, rollback, reason)), Decision::Transition { state, .. }) => {
                state.phase == *phase && state.promoted == *promoted && state.rollback == *rollback && state.reason.contains(reason) && state.since == rfc3339(at(c.now))
            }
            (Err(why), Decision::Nothing { why: w } | Decision::Refused { why: w }) => w.contains(why),
            _ => false,
        };
        if !ok {
            failures.push(format!("{}: want {:?}, got {d:#?}", c.name, c.want));
        }
        // Idempotence: deciding again on the new state with the same input changes nothing
        // (operator commands included: pausing a paused rollout is "nothing"), so a
        // controller that crashed after its push and runs again does not transition twice.
        if let Decision::Transition { state, .. } = &d {
            let again = ControllerInput { state: Some(state), ..inp.clone() };
            let d2 = decide(&again);
            if matches!(d2, Decision::Transition { .. }) {
                failures.push(format!("{}: not idempotent, second decision {d2:#?}", c.name));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn on_failure_halt_lets_promoted_hosts_keep_the_commit() {
    let mut f = fleet();
    f.policy.on_failure = OnFailure::Halt;
    let c2_canary = || reports(C1, &[("c1", Some(on(C2)))]);
    run(&f, vec![
        case("degraded canary, on-failure=halt: halt, no rollback", Some(state(C2, 0, Progressing, 0)), C2, reports(C1, &[("c1", Some(degraded(C1, C2, "apply_failed")))]), Command::Advance, 5)
            .want(Halted, 0, false, "keep what they have (on-failure=\"halt\")"),
        case("failing gate, on-failure=halt: halt, no rollback", Some(state(C2, 0, Progressing, 0)), C2, c2_canary(), Command::Advance, 60)
            .gate(0, Some("gate \"errors\": the query failed"))
            .want(Halted, 0, false, "the query failed"),
        case("the operator's halt --rollback stays possible", Some(state(C2, 0, Halted, 0)), C2, c2_canary(), Command::Halt { rollback: true, reason: String::new() }, 60)
            .want(Halted, 0, true, "halt --rollback"),
    ]);
    // on-failure="rollback" on a first rollout: nothing to return to.
    let mut first = state(C2, 0, Progressing, 0);
    first.stable = None;
    let r = reports(C1, &[("c1", Some(degraded(C1, C2, "apply_failed")))]);
    let d = decide(&ControllerInput { state: Some(&first), state_commit: None, branch: "main", tip: C2, fleet: Some(&fleet()), reports: &r, gates: &[], command: Command::Advance, now: at(5) });
    let Decision::Transition { state: n, .. } = d else { panic!("{d:?}") };
    assert!(n.phase == Halted && !n.rollback && n.reason.contains("no stable commit"), "{n:?}");
}

/// wave "all" of 10 hosts with max-parallel=3: batches of 3, 3, 3, 1 in stable-hash order,
/// each admitted when the previous one applied and is healthy.
#[test]
fn max_parallel_batches_a_wave() {
    use fwc_artifacts::rollout::MaxParallel;
    let mut f = fleet();
    f.members.retain(|m| m.wave < 2);
    f.members.extend((0..10).map(|i| Member { name: format!("a{i}"), wave: 2, declared: true }));
    f.policy.waves[2].max_parallel = Some(MaxParallel::Hosts(3));
    let order: Vec<String> = by_bucket(&f, 2).iter().map(|(_, m)| m.name.clone()).collect();
    let mut st = state(C2, 1, Progressing, 0);
    let mut seen = vec![];
    let mut reports: BTreeMap<String, HostReport> = f.members.iter().map(|m| (m.name.clone(), on(if m.wave < 2 { C2 } else { C1 }))).collect();
    for round in 0..8 {
        let d = decide(&ControllerInput { state: Some(&st), state_commit: None, branch: "main", tip: C2, fleet: Some(&f), reports: &reports, gates: &[], command: Command::Advance, now: at(100 + round) });
        match d {
            Decision::Transition { state: n, .. } => st = n,
            Decision::Nothing { why } => panic!("round {round}: {why}"),
            Decision::Refused { why } => panic!("{why}"),
        }
        if st.phase == Complete {
            break;
        }
        let now_in: Vec<String> = f.in_wave(2).filter(|m| admitted(&st, m)).map(|m| m.name.clone()).collect();
        seen.push(now_in.len());
        // The admitted hosts are a prefix of the stable-hash order.
        let mut sorted = now_in.clone();
        sorted.sort_by_key(|n| order.iter().position(|o| o == n));
        assert_eq!(sorted, order[..now_in.len()], "round {round}");
        // Not yet applied: nothing happens; a degraded one halts.
        let d = decide(&ControllerInput { state: Some(&st), state_commit: None, branch: "main", tip: C2, fleet: Some(&f), reports: &reports, gates: &[], command: Command::Advance, now: at(200) });
        assert!(matches!(&d, Decision::Nothing { why } if why.contains("waiting for")), "{d:?}");
        for n in &now_in {
            reports.insert(n.clone(), on(C2));
        }
    }
    assert_eq!(seen, [3, 6, 9, 10], "batches");
    assert_eq!(st.phase, Complete);
}

#[test]
fn every_state_counts_a_generation_and_names_its_predecessor() {
    let f = fleet();
    let st = state(C2, 0, Progressing, 0);
    let r = reports(C1, &[]);
    let d = decide(&ControllerInput { state: Some(&st), state_commit: Some("abc"), branch: "main", tip: C2, fleet: Some(&f), reports: &r, gates: &[], command: Command::Pause { reason: String::new() }, now: at(5) });
    let Decision::Transition { state: n, .. } = d else { panic!("{d:?}") };
    assert_eq!((n.generation, n.predecessor.as_deref()), (8, Some("abc")));
    let d = decide(&ControllerInput { state: None, state_commit: None, branch: "main", tip: C2, fleet: Some(&f), reports: &r, gates: &[], command: Command::Advance, now: at(5) });
    let Decision::Transition { state: n, .. } = d else { panic!("{d:?}") };
    assert_eq!((n.generation, n.predecessor, n.policy_commit.as_deref()), (1, None, Some(C1)));
}

/// `fwc rollout resume` after a self-check halt: the resume is recorded (hosts try the
/// commit again); the canary's old `self_check` failure is waited for, not halted on, until
/// `missing-timeout` after the resume; a failure of another kind still halts.
#[test]
fn after_a_resume_hosts_try_a_self_check_failure_again() {
    let f = fleet();
    let halted = state(C2, 0, Halted, 0);
    let r = reports(C1, &[("c1", Some(degraded(C1, C2, "self_check")))]);
    let input = |st, command, now| ControllerInput { state: Some(st), state_commit: None, branch: "main", tip: C2, fleet: Some(&f), reports: &r, gates: &[], command, now: at(now) };
    let Decision::Transition { state: resumed, .. } = decide(&input(&halted, Command::Resume { reason: String::new() }, 100)) else { panic!("resume") };
    assert_eq!(resumed.resumed, Some(Resumed { generation: resumed.generation, at: rfc3339(at(100)) }));
    let d = decide(&input(&resumed, Command::Advance, 160));
    assert!(matches!(&d, Decision::Nothing { why } if why.contains("waiting for 1 host(s)")), "{d:?}");
    let d = decide(&input(&resumed, Command::Advance, 100 + 600));
    assert!(matches!(&d, Decision::Transition { state, .. } if state.phase == Halted), "past missing-timeout the failure counts: {d:?}");
    let r = reports(C1, &[("c1", Some(degraded(C1, C2, "apply_failed")))]);
    let d = decide(&ControllerInput { state: Some(&resumed), state_commit: None, branch: "main", tip: C2, fleet: Some(&f), reports: &r, gates: &[], command: Command::Advance, now: at(160) });
    assert!(matches!(&d, Decision::Transition { state, .. } if state.phase == Halted), "{d:?}");
}

#[test]
fn the_policy_in_force_is_the_stable_commits() {
    let done = state(C1, 2, Complete, 0);
    assert_eq!(policy_candidates(Some(&done), C2, &Command::Advance), [C1, C2]);
    let mut running = state(C2, 1, Progressing, 0);
    running.policy_commit = Some(C1.into());
    assert_eq!(policy_candidates(Some(&running), C2, &Command::Advance), [C1]);
    running.policy_commit = None;
    assert_eq!(policy_candidates(Some(&running), C2, &Command::Advance), [C2]);
    assert_eq!(policy_candidates(None, C2, &Command::Advance), [C2]);
    let halted = state(C2, 0, Halted, 0);
    assert_eq!(policy_candidates(Some(&halted), "3333333333333333333333333333333333333333", &Command::Advance), [C1, "3333333333333333333333333333333333333333"]);
}

#[test]
fn a_new_rollout_keeps_stable_and_a_complete_one_sets_it() {
    let f = fleet();
    let st = state(C1, 2, Complete, 0);
    let r = reports(C1, &[]);
    let d = decide(&ControllerInput { state: Some(&st), state_commit: None, branch: "main", tip: C2, fleet: Some(&f), reports: &r, gates: &[], command: Command::Advance, now: at(5) });
    let Decision::Transition { state: n, summary } = d else { panic!("{d:?}") };
    assert_eq!((n.commit.as_str(), n.stable.as_deref()), (C2, Some(C1)));
    assert_eq!(n.waves, ["canary", "early", "all"]);
    assert!(summary.contains("start"), "{summary}");
    // A halted rollout's commit never becomes stable: the fix keeps the old stable.
    let mut h = state(C2, 0, Halted, 0);
    h.stable = Some(C1.into());
    let d = decide(&ControllerInput { state: Some(&h), state_commit: None, branch: "main", tip: "3333333333333333333333333333333333333333", fleet: Some(&f), reports: &r, gates: &[], command: Command::Advance, now: at(5) });
    let Decision::Transition { state: n, .. } = d else { panic!("{d:?}") };
    assert_eq!(n.stable.as_deref(), Some(C1));
}

#[test]
fn without_a_policy_nothing_starts() {
    let r = BTreeMap::new();
    let d = decide(&ControllerInput { state: None, state_commit: None, branch: "main", tip: C1, fleet: None, reports: &r, gates: &[], command: Command::Advance, now: at(0) });
    assert!(matches!(&d, Decision::Nothing { why } if why.contains("no `rollout` policy")), "{d:?}");
    let d = decide(&ControllerInput { state: None, state_commit: None, branch: "main", tip: C1, fleet: None, reports: &r, gates: &[], command: Command::Start { commit: C1.into() }, now: at(0) });
    assert!(matches!(d, Decision::Refused { .. }), "{d:?}");
}

#[test]
fn subject_is_the_tip_only_when_a_rollout_would_start() {
    let p = state(C1, 0, Progressing, 0);
    assert_eq!(subject(Some(&p), C2, &Command::Advance), C1);
    assert_eq!(subject(Some(&state(C1, 0, Halted, 0)), C2, &Command::Advance), C2);
    assert_eq!(subject(Some(&state(C1, 0, Halted, 0)), C2, &Command::Stop { reason: String::new() }), C1);
    assert_eq!(subject(None, C2, &Command::Advance), C2);
    assert_eq!(subject(Some(&p), C2, &Command::Start { commit: C1.into() }), C1);
}

#[test]
fn gates_wanted_skip_the_last_wave() {
    assert_eq!(gates_wanted(Some(&state(C2, 0, Progressing, 0)), &fleet()), [0]);
    assert_eq!(gates_wanted(Some(&state(C2, 2, Progressing, 0)), &fleet()), [0, 1]);
    assert!(gates_wanted(None, &fleet()).is_empty());
}

/// A gate that gives no answer (its query errors, or returns nothing) is pending within its own
/// grace, counted from the state's last transition: it neither promotes nor halts; past the
/// grace it fails. It never stops a degraded host from halting, and a gate that answers "fails"
/// halts at once whatever its grace.
#[test]
fn a_gate_without_an_answer_is_pending_within_its_grace_then_fails() {
    let c2_canary = || reports(C1, &[("c1", Some(on(C2)))]);
    let soaked = || Some(soaking(state(C2, 0, Progressing, 0), 1));
    let mut gated = fleet();
    gated.policy.waves[0].soak_secs = 0;
    run(&gated, vec![
        case("no answer, no grace: fails at once", Some(state(C2, 0, Progressing, 0)), C2, c2_canary(), Command::Advance, 10).silent_gate(0, 0).want(Halted, 0, true, "the query failed"),
        case("no answer within its grace: pending, no promotion", Some(state(C2, 0, Progressing, 0)), C2, c2_canary(), Command::Advance, 60)
            .silent_gate(0, 120)
            .nothing("waiting within its grace (60s of 2m)"),
        case("no answer past its grace: halt", Some(state(C2, 0, Progressing, 0)), C2, c2_canary(), Command::Advance, 120)
            .silent_gate(0, 120)
            .want(Halted, 0, true, "no answer for longer than its grace (2m)"),
        case("pending gate, degraded canary: halts all the same", Some(state(C2, 0, Progressing, 0)), C2, reports(C1, &[("c1", Some(degraded(C1, C2, "self_check")))]), Command::Advance, 5)
            .silent_gate(0, 600)
            .want(Halted, 0, true, "c1 (self_check)"),
        case("a gate that answers and fails ignores its grace: halt", Some(state(C2, 0, Progressing, 0)), C2, c2_canary(), Command::Advance, 5)
            .gate(0, Some("gate \"errors\" fails: 3"))
            .want(Halted, 0, true, "fails: 3"),
        case("an earlier wave's silent gate within grace holds the next promotion", Some(state(C2, 1, Progressing, 60)), C2, reports(C2, &[]), Command::Advance, 90)
            .silent_gate(0, 300)
            .nothing("wave canary: gate \"errors\""),
    ]);
    // The soak's clock and the grace's are both the last transition's: the soak starting
    // resets the grace.
    run(&fleet(), vec![case("soaking, gate silent within grace: wait", soaked(), C2, c2_canary(), Command::Advance, 61).silent_gate(0, 120).nothing("within its grace")]);
    // From the query's answer to the result.
    let g = Gate { name: "errors".into(), query: "x".into(), op: GateOp::AtMost, threshold: 0.5, allow_empty: false, grace_secs: 120 };
    let r = gate_result(0, &g, Err("bad_data: parse error"));
    assert!(r.no_answer && r.grace_secs == 120 && r.failure.as_deref().unwrap().contains("parse error"), "{r:?}");
    let r = gate_result(0, &g, Ok(&[]));
    assert!(r.no_answer && r.failure.as_deref().unwrap().contains("no samples"), "{r:?}");
    let r = gate_result(0, &Gate { allow_empty: true, ..g.clone() }, Ok(&[]));
    assert!(!r.no_answer && r.failure.is_none(), "{r:?}");
    let r = gate_result(0, &g, Ok(&[(String::new(), 0.9)]));
    assert!(!r.no_answer && r.failure.is_some(), "an answer that fails is no silence: {r:?}");
}

#[test]
fn gates_judge_every_sample() {
    let g = Gate { name: "errors".into(), query: "rate(x[1m])".into(), op: GateOp::AtMost, threshold: 0.5, allow_empty: false, grace_secs: 0 };
    assert_eq!(judge_gate(&g, &[("{host=\"a\"}".into(), 0.1), ("{host=\"b\"}".into(), 0.5)]), None);
    let bad = judge_gate(&g, &[("{host=\"a\"}".into(), 0.1), ("{host=\"b\"}".into(), 0.7)]).unwrap();
    assert!(bad.contains("host=\"b\"} = 0.7") && !bad.contains("0.1"), "{bad}");
    assert!(judge_gate(&g, &[]).unwrap().contains("no samples"));
    assert!(judge_gate(&Gate { allow_empty: true, ..g.clone() }, &[]).is_none());
    let min = Gate { op: GateOp::AtLeast, threshold: 1.0, ..g };
    assert!(judge_gate(&min, &[(String::new(), 0.9)]).is_some());
    assert!(judge_gate(&min, &[(String::new(), f64::NAN)]).is_some());
}

#[test]
fn max_unavailable_percent_rounds_down() {
    assert_eq!(allowed_missing(MaxUnavailable::Percent(10), 25), 2);
    assert_eq!(allowed_missing(MaxUnavailable::Percent(10), 9), 0);
    assert_eq!(allowed_missing(MaxUnavailable::Hosts(3), 1), 3);
}
