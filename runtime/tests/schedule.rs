//! Schedules with real packets: `during=` windows (Europe/Berlin) around "now"
//! admit and windows outside refuse, on filter rules and port forwards, and `fwc explain`
//! agrees with the kernel; an `until=` in the past removes the rule (`fwc apply`, and the
//! agent's reconcile once its clock passes the date); the agent compiles again when the
//! applied artifacts' `valid_until` (a daylight-saving change) passes, with the clock fixed by
//! `FWC_AGENT_TEST_NOW`. Everything runs in `fwc-t-` namespaces; nothing waits for real time.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use fwc_testkit::{privileged, Netns, Topology, output_text as text};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

mod agent_common;
use agent_common::*;

fn fwc(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fwc"));
    c.args(args).env("NO_COLOR", "1").env_remove("SSH_AUTH_SOCK").stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// Connect from `ns` and read what the server says (None: no answer).
fn tcp(ns: &Netns, addr: &str, port: u16) -> Option<String> {
    let o = ns.try_exec(&["timeout", "4", "socat", "-T2", "-", &format!("TCP4:{addr}:{port},connect-timeout=1")]);
    let out = String::from_utf8_lossy(&o.stdout).trim().to_string();
    (o.status.success() && !out.is_empty()).then_some(out)
}

fn serve(ns: &mut Netns, port: u16, reply: &str) {
    ns.spawn(&["socat", &format!("TCP4-LISTEN:{port},fork,reuseaddr"), &format!("SYSTEM:echo {reply}")]);
    let t = Instant::now();
    // A generous deadline, not a budget: the listener is usually up in milliseconds.
    while t.elapsed() < Duration::from_secs(60) {
        if !String::from_utf8_lossy(&ns.try_exec(&["ss", "-Hlnt", &format!("sport = :{port}")]).stdout).trim().is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("nothing listens on {port} in {}", ns.name);
}

/// A window in Europe/Berlin from `now + from_h` to `now + to_h` hours (crossing midnight as
/// needed): `"Thu 21:14-03:14"`.
fn berlin_window(now: Timestamp, from_h: i64, to_h: i64) -> String {
    let tz = TimeZone::get("Europe/Berlin").unwrap();
    let a = now.checked_add(SignedDuration::from_hours(from_h)).unwrap().to_zoned(tz.clone());
    let b = now.checked_add(SignedDuration::from_hours(to_h)).unwrap().to_zoned(tz);
    format!("{} {}-{}", a.strftime("%a"), a.strftime("%H:%M"), b.strftime("%H:%M"))
}

#[test]
fn during_windows_around_now_admit_and_outside_refuse_and_until_past_removes() {
    if !privileged("during_windows_around_now_admit_and_outside_refuse_and_until_past_removes") {
        return;
    }
    let mut t = Topology::new();
    for (p, r) in [(80, "inside"), (81, "outside"), (82, "expired"), (83, "current")] {
        serve(&mut t.host, p, r);
    }
    serve(&mut t.backend, 80, "backend80");
    // Three hours either side of now: the test never runs near a window's edge.
    let now = Timestamp::now();
    let (inside, outside) = (berlin_window(now, -3, 3), berlin_window(now, 6, 9));
    let kdl = format!(
        "fwc 1\ninput policy=drop {{\n    \
         allow \"in-window\" proto=tcp port=80 during=\"{inside}\" tz=\"Europe/Berlin\"\n    \
         allow \"out-window\" proto=tcp port=81 during=\"{outside}\" tz=\"Europe/Berlin\"\n    \
         allow \"expired\" proto=tcp port=82 until=\"2020-01-31\"\n    \
         allow \"current\" proto=tcp port=83 until=\"2099-01-31\"\n}}\n\
         forward \"timed\" listen=\":8080\" to=\"198.18.2.2:80\" during=\"{inside}\" tz=\"Europe/Berlin\"\n\
         forward \"closed\" listen=\":8081\" to=\"198.18.2.2:80\" during=\"{outside}\" tz=\"Europe/Berlin\"\n"
    );
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("fwc.kdl"), &kdl).unwrap();
    let state = tmp.path().join("state");
    let (r, s) = (repo.to_str().unwrap(), state.to_str().unwrap());

    let plan = fwc(&["plan", r, "--state-dir", s, "--netns", &t.host.name], &[]);
    assert!(text(&plan).contains("expired at the end of 2020-01-31"), "plan notes the expired rule:\n{}", text(&plan));
    let o = fwc(&["apply", r, "--state-dir", s, "--netns", &t.host.name, "--auto-approve"], &[]);
    assert!(o.status.success(), "fwc apply:\n{}", text(&o));

    assert_eq!(tcp(&t.client, "198.18.1.1", 80).as_deref(), Some("inside"), "{inside}: the window around now admits\n{kdl}");
    assert_eq!(tcp(&t.client, "198.18.1.1", 81), None, "{outside}: the window later today refuses");
    assert_eq!(tcp(&t.client, "198.18.1.1", 82), None, "the rule past its until= is gone");
    assert_eq!(tcp(&t.client, "198.18.1.1", 83).as_deref(), Some("current"), "the rule before its until= holds");
    assert_eq!(tcp(&t.client, "198.18.1.1", 8080).as_deref(), Some("backend80"), "the forward inside its window");
    assert_eq!(tcp(&t.client, "198.18.1.1", 8081), None, "the forward outside its window");
    let listed = nft_input(&t.host);
    assert!(!listed.contains("fwc:filter:expired"), "{listed}");
    assert!(listed.contains("meta day . meta hour"), "{listed}");

    // The evaluator agrees with the kernel, at the same time.
    for (flow, want) in [("tcp 198.18.1.2 -> 198.18.1.1:80", "accept"), ("tcp 198.18.1.2 -> 198.18.1.1:81", "drop"), ("tcp 198.18.1.2 -> 198.18.1.1:82", "drop")] {
        let o = fwc(&["explain", r, flow, "--json", "--at", &now.to_string()], &[]);
        assert!(o.status.success(), "{}", text(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["explanation"]["verdict"], want, "{flow}: {v:#}");
    }
    // Loaded, listed and compared in UTC: no drift, nothing to do (whatever TZ fwc runs with).
    let st = fwc(&["status", "--json", "--state-dir", s, "--netns", &t.host.name], &[("TZ", "America/New_York")]);
    let st: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap_or_else(|_| panic!("{}", text(&st)));
    assert_eq!(st["drift"], false, "{st:#}");
    // fwc status says until when the applied windows are right (the next clock change in Berlin).
    assert!(st["valid_until"].as_str().is_some_and(|v| v.parse::<Timestamp>().is_ok_and(|t| t > now)), "{st:#}");
}

/// The input chain as nft lists it in UTC (`meta hour` is printed in nft's local time).
fn nft_input(ns: &Netns) -> String {
    let o = ns.cmd("nft").args(["list", "chain", "inet", "fwc", "input"]).env("TZ", "UTC").output().unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The agent's reconcile with its clock fixed by the test hooks: an `until=` passing removes
/// the rule from the kernel, and a daylight-saving change moves a Berlin window in UTC — the
/// applied manifest's `valid_until` says when, and the agent compiles the same commit again.
#[test]
fn agent_recompiles_when_an_until_passes_and_when_the_clocks_change() {
    if !privileged("agent_recompiles_when_an_until_passes_and_when_the_clocks_change") {
        return;
    }
    let ns = Netns::new("sched");
    let repo = Repo::new();
    let state = repo.root.join("state");
    let commit = repo.commit(
        "fwc 1\ninput policy=drop {\n    \
         allow \"web\" proto=tcp port=80 during=\"Mon-Fri 08:00-18:00\" tz=\"Europe/Berlin\"\n    \
         allow \"contractor\" proto=tcp port=22 until=\"2026-10-24\" tz=\"Europe/Berlin\"\n}\n",
        "schedules",
        None,
        false,
    );
    let once = |now: &str| {
        let env = [("FWC_AGENT_TEST_HOOKS", "1"), ("FWC_AGENT_TEST_NOW", now)];
        let o = fwc(
            &["agent", "--once", "--no-forwarder", "--metrics", "off", "--host", "localhost", "--fetch-timeout", "10s", "--repo", &repo.url(), "--state-dir", state.to_str().unwrap(), "--netns", &ns.name],
            &env,
        );
        assert_eq!(o.status.code(), Some(0), "agent --once at {now}:\n{}", text(&o));
    };
    // Friday 2026-10-23, summer time: 08:00 Berlin = 06:00 UTC; valid until the contractor's
    // expiry (end of 2026-10-24 Berlin = 2026-10-24 22:00 UTC).
    once("2026-10-23T12:00:00Z");
    let listed = nft_input(&ns);
    assert!(listed.contains("fwc:filter:contractor"), "{listed}");
    assert!(listed.contains("\"Monday\" . \"06:00\"-\"15:59:59\""), "{listed}");
    // Nothing changes before valid_until: the agent does not apply again.
    once("2026-10-24T21:59:00Z");
    assert_eq!(audit(&state).iter().filter(|e| e["commit"] == commit.as_str() && e["action"] == "apply").count(), 1);
    // Past the expiry: the same commit compiled again, the contractor's rule removed.
    once("2026-10-24T22:00:00Z");
    let listed = nft_input(&ns);
    assert!(!listed.contains("fwc:filter:contractor"), "the expired rule is still loaded:\n{listed}");
    // The next deadline is the clock change (2026-10-25 01:00 UTC); after it, 08:00 Berlin is 07:00 UTC.
    once("2026-10-25T01:00:00Z");
    let listed = nft_input(&ns);
    assert!(listed.contains("\"Monday\" . \"07:00\"-\"16:59:59\""), "the window did not move with the clocks:\n{listed}");
    let applies: Vec<serde_json::Value> = audit(&state).into_iter().filter(|e| e["commit"] == commit.as_str() && e["action"] == "apply").collect();
    assert_eq!(applies.len(), 3, "applied at first, at the expiry and at the clock change");
    assert!(applies[2]["detail"].as_str().is_some_and(|d| d.contains("valid until 2026-10-25T01:00:00Z")), "{:#}", applies[2]);
    assert_audit_verifies(&state);
}
