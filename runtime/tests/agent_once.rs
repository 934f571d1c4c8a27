//! `fwc agent --once` exit codes (docs/operations.md "Exit codes of --once"), rollback by
//! force-push refused and allowed (`--allow-rewind`, the one-shot allow file), and the degraded
//! state surviving a restart — against real bare git repositories, applying inside a scratch
//! namespace (`--netns`), never the root namespace.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use fwc_runtime::metrics::http_request;
use fwc_testkit::{privileged, Netns};

mod agent_common;
use agent_common::*;

/// `fwc agent --once` with the test defaults; `extra` after them.
fn once(state: &Path, url: &str, ns: &Netns, extra: &[&str], env: &[(&str, &str)]) -> Output {
    once_as(state, url, ns, "localhost", extra, env)
}

fn once_as(state: &Path, url: &str, ns: &Netns, host: &str, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fwc"));
    c.args(["agent", "--once", "--no-forwarder", "--metrics", "off", "--host", host, "--fetch-timeout", "10s"])
        .args(["--repo", url, "--state-dir", state.to_str().unwrap(), "--netns", &ns.name])
        .args(extra)
        .env_remove("SSH_AUTH_SOCK")
        .stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

#[track_caller]
fn code(o: &Output, want: i32) {
    assert_eq!(o.status.code(), Some(want), "stderr:\n{}", String::from_utf8_lossy(&o.stderr));
}

fn entries(state: &Path, commit: &str, action: &str) -> Vec<serde_json::Value> {
    audit(state).into_iter().filter(|e| e["commit"] == commit && e["action"] == action).collect()
}

#[test]
fn once_exit_codes_for_every_failure() {
    if !privileged("once_exit_codes_for_every_failure") {
        return;
    }
    let ns = Netns::new("once");
    let repo = Repo::new();
    let st = |n: &str| repo.root.join(n);

    // Unreachable remote and a repository without the branch: fetch failures, 3.
    code(&once(&st("s0"), "file:///nonexistent/fwc-rules.git", &ns, &[], &[]), 3);
    code(&once(&st("s1"), &repo.url(), &ns, &[], &[]), 3);
    let c1 = repo.commit(&allow(80, "web"), "allow 80", None, false);
    code(&once(&st("s1"), &repo.url(), &ns, &["--branch", "nope"], &[]), 3);
    // Unknown --host: the commit is refused (compile), 4.
    code(&once_as(&st("s2"), &repo.url(), &ns, "no-such-host", &[], &[]), 4);
    // Applied: 0; again (nothing to do): 0.
    code(&once(&st("s1"), &repo.url(), &ns, &[], &[]), 0);
    code(&once(&st("s1"), &repo.url(), &ns, &[], &[]), 0);
    assert_eq!(entries(&st("s1"), &c1, "apply").len(), 1);
    // --refs-url: a URL that cannot be one is a configuration error, 1; a refs file that
    // cannot be read falls back to a git fetch (nothing to do: 0).
    let o = once(&st("s1"), &repo.url(), &ns, &["--refs-url", "auto"], &[]);
    code(&o, 1);
    assert!(String::from_utf8_lossy(&o.stderr).contains("--refs-url auto needs an http:// or https:// --repo"), "{}", String::from_utf8_lossy(&o.stderr));
    code(&once(&st("s1"), &repo.url(), &ns, &["--refs-url", "ftp://h/info/refs"], &[]), 1);
    code(&once(&st("s1"), &repo.url(), &ns, &["--refs-url", "http://127.0.0.1:1/rules.git/info/refs"], &[]), 0);
    // Compile error: 4, and still 4 on the next run without a second audit entry.
    let c2 = repo.commit("fwc 1\ninput policy=drop {\n    allow \"bad\" proto=tcp port=99999\n}\n", "typo", None, false);
    code(&once(&st("s1"), &repo.url(), &ns, &[], &[]), 4);
    code(&once(&st("s1"), &repo.url(), &ns, &[], &[]), 4);
    assert_eq!(entries(&st("s1"), &c2, "refuse").len(), 1);
    // Signature required and missing: 4.
    let signers = repo.root.join("allowed_signers");
    std::fs::write(&signers, "").unwrap();
    code(&once(&st("s3"), &repo.url(), &ns, &["--allowed-signers", signers.to_str().unwrap()], &[]), 4);
    // A failing apply (rolled back): 5.
    let c3 = repo.commit(&allow(81, "alt"), "breaks apply [fwc-test: fail-apply]", None, false);
    code(&once(&st("s1"), &repo.url(), &ns, &[], &[("FWC_AGENT_TEST_HOOKS", "1")]), 5);
    assert_eq!(entries(&st("s1"), &c3, "apply")[0]["result"], "rolled_back");

    // A big set file is cached in the state dir by the agent's compile: a later commit that
    // leaves it unchanged reads the entry (not rewritten: same inode) instead of parsing it.
    let list: String = (0..8000u32).map(|i| format!("10.{}.{}.{}\n", i >> 16, (i >> 7) & 255, 2 * (i & 127))).collect();
    std::fs::create_dir_all(repo.work.join("lists")).unwrap();
    std::fs::write(repo.work.join("lists/bl.netset"), list).unwrap();
    agent_common::git(&repo.work, &["add", "lists"]);
    let bl = |port: u16| format!("fwc 1\nset \"bl\" file=\"lists/bl.netset\"\ninput policy=drop {{\n    deny \"bl\" from=\"@bl\"\n    allow \"web\" proto=tcp port={port}\n}}\n");
    repo.commit(&bl(80), "blocklist", None, false);
    code(&once(&st("s1"), &repo.url(), &ns, &[], &[]), 0);
    let cached = || -> Vec<(std::path::PathBuf, u64)> {
        use std::os::unix::fs::MetadataExt;
        std::fs::read_dir(st("s1").join("sets")).unwrap().flatten().map(|e| (e.path(), e.metadata().unwrap().ino())).collect()
    };
    let first = cached();
    // The mirror the agent fetched into is whole for git, and the fwc binary's packs are at
    // its zlib level (agent/git_zlib.rs: stored): every packed object takes at least its size.
    let mirror = st("s1").join("mirror.git");
    agent_common::git(&mirror, &["fsck", "--full", "--strict"]);
    let blob = agent_common::git(&repo.work, &["rev-parse", "HEAD:lists/bl.netset"]);
    let idx: Vec<String> = std::fs::read_dir(mirror.join("objects/pack"))
        .unwrap()
        .flatten()
        .map(|e| e.path().to_string_lossy().into_owned())
        .filter(|p| p.ends_with(".idx"))
        .collect();
    let packed = agent_common::git(&mirror, &[&["verify-pack", "-v"], &idx.iter().map(String::as_str).collect::<Vec<_>>()[..]].concat());
    let line = packed.lines().find(|l| l.starts_with(&blob)).unwrap_or_else(|| panic!("{blob} not in the mirror's packs:\n{packed}"));
    let f: Vec<u64> = line.split_whitespace().skip(2).take(2).map(|n| n.parse().unwrap()).collect();
    assert!(f[1] >= f[0], "the list is compressed in the mirror (size, size in pack: {f:?}): libgit2 did not bind to fwc's deflateInit_");
    // The entry, the list's text beside it, and the list's pointer to it.
    assert_eq!(first.len(), 3, "{first:?}");
    repo.commit(&bl(82), "other port, same list", None, false);
    code(&once(&st("s1"), &repo.url(), &ns, &[], &[]), 0);
    assert_eq!(cached(), first);
    assert!(ns.exec(&["nft", "list", "set", "inet", "fwc", "bl_v4_32"]).contains("10.0.45.254"));
}

#[test]
fn force_push_is_refused_until_allowed_and_degraded_survives_a_restart() {
    if !privileged("force_push_is_refused_until_allowed_and_degraded_survives_a_restart") {
        return;
    }
    let ns = Netns::new("rewind");
    let repo = Repo::new();
    let state = repo.root.join("state");
    let c1 = repo.commit(&allow(80, "web"), "v1", None, false);
    code(&once(&state, &repo.url(), &ns, &[], &[]), 0);
    let c2 = repo.commit(&allow(81, "fix"), "v2: security fix", None, false);
    code(&once(&state, &repo.url(), &ns, &[], &[]), 0);

    // The rollback attack: v1 force-pushed over v2. Refused (4), v2 stays live.
    git(&repo.work, &["reset", "-q", "--hard", &c1]);
    let bare = repo.bare.to_str().unwrap().to_string();
    git(&repo.work, &["push", "-q", "-f", &bare, "HEAD:main"]);
    code(&once(&state, &repo.url(), &ns, &[], &[]), 4);
    let e = &entries(&state, &c1, "refuse")[0];
    assert!(e["detail"].as_str().unwrap().starts_with("rewind: "), "{e:#}");
    assert!(e["detail"].as_str().unwrap().contains("allow-rewind"), "the refusal says how to allow it: {e:#}");
    let live = fwc_runtime::state::StateDir::new(&state).current().unwrap().unwrap();
    assert_eq!(live.meta.commit.as_deref(), Some(c2.as_str()), "v2 must stay applied");

    // Restart (a long-running agent this time): still degraded, nothing re-audited.
    let before = audit(&state).len();
    let agent = AgentProc::start(&state, &repo.url(), &ns.name, &["--no-forwarder"], &[]);
    assert!(wait_until(Duration::from_secs(10), || http_request(agent.metrics, "GET", "/readyz", &[], b"").unwrap().0 == 200));
    std::thread::sleep(Duration::from_millis(1500));
    let (_, text) = http_request(agent.metrics, "GET", "/readyz", &[], b"").unwrap();
    assert!(text.contains("degraded"), "degraded must survive the restart: {text}\n{}", agent.log_text());
    let m = agent.scrape();
    assert!(m.contains(&format!("fwc_agent_degraded{{host=\"localhost\",commit=\"{c1}\",reason=\"refused\"}} 1")), "{m}");
    assert!(m.contains(&format!("fwc_applied_commit_info{{host=\"localhost\",commit=\"{c2}\"}} 1")), "{m}");
    assert_eq!(audit(&state).len(), before, "a restart must not audit the refusal again");
    drop(agent);

    // Allowed by --allow-rewind: applied, audited as an allowed rewind.
    code(&once(&state, &repo.url(), &ns, &["--allow-rewind"], &[]), 0);
    let e = &entries(&state, &c1, "apply")[1];
    assert_eq!(e["result"], "ok", "{e:#}");
    assert!(e["detail"].as_str().unwrap().contains("rewind allowed by --allow-rewind"), "{e:#}");

    // A later commit on top applies normally and clears degraded for good.
    git(&repo.work, &["reset", "-q", "--hard", &c1]);
    let c3 = repo.commit(&allow(82, "next"), "v3", None, false);
    code(&once(&state, &repo.url(), &ns, &[], &[]), 0);
    let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(state.join("agent.json")).unwrap()).unwrap();
    assert_eq!(j["handled"]["commit"], c3.as_str());
    assert_eq!(j["handled"]["outcome"], "applied");
}
