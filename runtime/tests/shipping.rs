//! What ships beside the binary: a man page for every visible (sub)command, shell completions
//! without internal commands or file-name completion where a name is expected, and the
//! packaged systemd unit, checked by the real `systemd-analyze` (verify + security ≤ 4.0), the
//! .deb and the container image.

use std::path::{Path, PathBuf};
use std::process::Command;

fn fwc() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fwc"));
    c.env("NO_COLOR", "1").env_remove("FWC_LOG");
    c
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

/// `fwc`, `fwc-qos`, `fwc-qos-stats`, ...: every command a user can type, from the clap tree.
fn visible_commands(cmd: &clap::Command, name: &str, out: &mut Vec<String>) {
    out.push(name.to_string());
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        visible_commands(sub, &format!("{name}-{}", sub.get_name()), out);
    }
}

#[test]
fn every_visible_command_has_a_man_page_and_hidden_ones_none() {
    let dir = tempfile::tempdir().unwrap();
    let o = fwc().args(["man", "--out"]).arg(dir.path()).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut want = Vec::new();
    visible_commands(&<fwc_runtime::cli::Cli as clap::CommandFactory>::command(), "fwc", &mut want);
    assert!(want.len() > 15, "{want:?}");
    for name in &want {
        let page = std::fs::read_to_string(dir.path().join(format!("{name}.1"))).unwrap_or_else(|e| panic!("{name}.1: {e}"));
        assert!(page.contains(".TH"), "{name}.1 is not a roff man page");
        assert!(page.contains(".SH SYNOPSIS"), "{name}.1 has no synopsis");
    }
    let mut got: Vec<String> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().trim_end_matches(".1").to_string()).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "exactly one page per visible command (no __confirm-watch, no man)");
    // The page of a nested command names its full invocation.
    let stats = std::fs::read_to_string(dir.path().join("fwc-qos-stats.1")).unwrap();
    assert!(stats.contains("fwc qos stats"), "{stats}");
    // man(1) itself renders it, when installed.
    if let Ok(o) = Command::new("man").arg("-l").arg(dir.path().join("fwc-apply.1")).env("MANWIDTH", "100").output() {
        if o.status.success() {
            assert!(String::from_utf8_lossy(&o.stdout).contains("--auto-approve"));
        }
    }
}

#[test]
fn completions_hide_internal_commands_and_do_not_complete_files_for_names() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let o = fwc().args(["completions", shell]).output().unwrap();
        assert!(o.status.success());
        let s = String::from_utf8_lossy(&o.stdout);
        assert!(!s.contains("confirm-watch"), "{shell} completion offers __confirm-watch");
        assert!(!s.contains("subcmd__man") && !s.contains("\"man\"") && !s.contains(" man "), "{shell} completion offers the hidden man command");
        assert!(s.contains("rollback"), "{shell}: visible commands are still there");
    }
    // zsh: `:HOST:` with no action completes nothing; `_default` would complete file names.
    let zsh = String::from_utf8_lossy(&fwc().args(["completions", "zsh"]).output().unwrap().stdout).into_owned();
    for line in zsh.lines().filter(|l| l.contains("'--netns=") || l.contains("'--host=") || l.contains("::name -- Artifact")) {
        assert!(!line.contains("_default") && !line.contains("_files"), "file completion for a name: {line}");
    }
    assert!(zsh.contains("'--netns="), "zsh completion knows --netns");
    // fish: -f (no files) on --netns and --host.
    let fish = String::from_utf8_lossy(&fwc().args(["completions", "fish"]).output().unwrap().stdout).into_owned();
    for line in fish.lines().filter(|l| l.contains("-l netns ") || l.contains("-l host ")) {
        assert!(line.contains(" -f"), "fish completes files for: {line}");
    }
    // bash: the script parses.
    let bash = fwc().args(["completions", "bash"]).output().unwrap().stdout;
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), bash).unwrap();
    assert!(Command::new("bash").arg("-n").arg(f.path()).status().unwrap().success());
}

/// `systemd-analyze`, or None (SKIP) when it is missing outside CI.
fn systemd_analyze() -> Option<Command> {
    match Command::new("systemd-analyze").arg("--version").output() {
        Ok(o) if o.status.success() => Some(Command::new("systemd-analyze")),
        _ if std::env::var_os("CI").is_some() || std::env::var_os("FWC_REQUIRE_PRIVILEGED").is_some() => panic!("systemd-analyze is required in CI (apt-get install systemd)"),
        _ => {
            eprintln!("SKIP: systemd-analyze not installed");
            None
        }
    }
}

fn units() -> Vec<PathBuf> {
    let dir = repo_root().join("packaging/systemd");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "service")).collect();
    v.sort();
    assert!(!v.is_empty(), "no units in {}", dir.display());
    v
}

#[test]
fn packaged_units_verify_and_rate_at_most_4_0() {
    let Some(_) = systemd_analyze() else { return };
    // `verify` checks that ExecStart= is executable: a copy of each unit points at this build.
    let scratch = tempfile::tempdir().unwrap();
    for unit in units() {
        let text = std::fs::read_to_string(&unit).unwrap();
        assert!(text.contains("ExecStart=/usr/bin/fwc "), "{}: ExecStart is the packaged /usr/bin/fwc", unit.display());
        let copy = scratch.path().join(unit.file_name().unwrap());
        std::fs::write(&copy, text.replace("/usr/bin/fwc", env!("CARGO_BIN_EXE_fwc"))).unwrap();
        let o = systemd_analyze().unwrap().args(["verify", "--man=no"]).arg(&copy).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success() && err.trim().is_empty(), "systemd-analyze verify {}: {err}", unit.display());

        let o = systemd_analyze().unwrap().args(["security", "--offline=yes", "--no-pager"]).arg(&unit).output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        let level: f64 = out
            .lines()
            .find_map(|l| l.split("Overall exposure level for ").nth(1))
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no exposure level in:\n{out}\n{}", String::from_utf8_lossy(&o.stderr)));
        assert!(level <= 4.0, "{}: exposure {level} > 4.0\n{out}", unit.display());
        // What fwc needs and no more (that it is enough: the_agent_units_capabilities_are_enough_to_apply).
        let text = std::fs::read_to_string(&unit).unwrap();
        let bounding = unit_setting(&text, "CapabilityBoundingSet").expect("a bounding set");
        let mut caps: Vec<&str> = bounding.split_whitespace().collect();
        caps.sort();
        assert_eq!(caps, ["CAP_NET_ADMIN", "CAP_NET_BIND_SERVICE", "CAP_SYS_ADMIN"], "{}", unit.display());
        assert_eq!(unit_setting(&text, "AmbientCapabilities"), Some(""), "{}: ambient capabilities add nothing for root", unit.display());
    }
}

/// The value of `Key=` in a unit file (the last assignment wins, as in systemd).
fn unit_setting<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().filter_map(|l| l.strip_prefix(key)?.strip_prefix('=')).last().map(str::trim)
}

/// The agent unit's privileges are enough for an apply: `fwc apply` runs with exactly the
/// unit's `CapabilityBoundingSet=`, `SecureBits=` and `NoNewPrivileges=` (through `setpriv`,
/// as systemd sets them) in a test namespace, on rules that need every granted capability: a
/// filter and a kernel forward (nftables, rendered in a scratch namespace: CAP_SYS_ADMIN), an
/// `ip_forward` sysctl, a userspace forward on port 443. The unit once lacked CAP_SYS_ADMIN and
/// every apply failed with "unshare failed: Operation not permitted". Seccomp settings
/// (`SystemCallFilter=`, `RestrictNamespaces=`) need a running systemd and are not exercised.
#[test]
fn the_agent_units_capabilities_are_enough_to_apply() {
    let name = "the_agent_units_capabilities_are_enough_to_apply";
    if !fwc_testkit::privileged(name) || !fwc_testkit::tool(name, "setpriv", "util-linux") {
        return;
    }
    let text = std::fs::read_to_string(repo_root().join("packaging/systemd/fwc-agent.service")).unwrap();
    let caps: Vec<String> = unit_setting(&text, "CapabilityBoundingSet")
        .expect("a bounding set")
        .split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    let mut setpriv = vec!["setpriv".to_string(), "--bounding-set".into(), format!("-all,{}", caps.join(","))];
    if let Some(bits) = unit_setting(&text, "SecureBits").filter(|b| !b.is_empty()) {
        let bits: Vec<String> = bits.split_whitespace().map(|b| format!("+{}", b.replace('-', "_"))).collect();
        setpriv.extend(["--securebits".into(), bits.join(",")]);
    }
    if unit_setting(&text, "NoNewPrivileges") == Some("yes") {
        setpriv.push("--no-new-privs".into());
    }

    let ns = fwc_testkit::Netns::new("unit");
    let dir = tempfile::tempdir().unwrap();
    let repo = fwc_testkit::rule_repo(
        dir.path(),
        "fwc 1\ninput policy=accept {\n    deny \"no-telnet\" proto=tcp port=23\n}\nforward \"web\" listen=\":8080\" to=\"198.18.1.2:80\"\nforward \"tls\" listen=\":443\" to=\"198.18.1.2:443\" backend=\"userspace\"\n",
    );
    let state = dir.path().join("state");
    let mut argv: Vec<String> = setpriv.clone();
    argv.extend(["--".into(), env!("CARGO_BIN_EXE_fwc").into(), "apply".into(), repo.display().to_string()]);
    argv.extend(["--state-dir".into(), state.display().to_string(), "--auto-approve".into()]);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let o = ns.try_exec(&argv);
    let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "fwc apply with the unit's privileges ({}) failed:\n{out}", setpriv.join(" "));
    let table = ns.exec(&["nft", "list", "table", "inet", "fwc"]);
    assert!(table.contains("dnat") && table.contains("no-telnet"), "{table}");
    assert_eq!(ns.exec(&["cat", "/proc/sys/net/ipv4/ip_forward"]).trim(), "1");
    assert!(ns.exec(&["ss", "-Htln", "sport = :443"]).contains(":443"), "the forwarder does not listen on :443\n{out}");
}

/// The Debian package: packaging/deb/build.sh (cargo-deb, [package.metadata.deb] of
/// runtime/Cargo.toml) packages this build; the .deb holds the binary, the unit, a man page per
/// command and the completions, passes lintian without errors, and installs into (and is
/// removed from) a scratch root with dpkg, where the installed fwc runs.
#[test]
fn the_deb_installs_binary_unit_man_pages_and_completions() {
    if !fwc_testkit::tool("the_deb_installs_binary_unit_man_pages_and_completions", "cargo-deb", "cargo install cargo-deb")
        || !fwc_testkit::tool("the_deb_installs_binary_unit_man_pages_and_completions", "lintian", "lintian")
    {
        return;
    }
    // This test's binary is target/debug/fwc (the dev profile): package it as it is.
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_fwc"));
    assert_eq!(exe.parent().and_then(|p| p.file_name()).and_then(|n| n.to_str()), Some("debug"), "{}", exe.display());
    let out = tempfile::tempdir().unwrap();
    let o = Command::new(repo_root().join("packaging/deb/build.sh"))
        .args(["--strip", "--output"])
        .arg(out.path())
        .env("PROFILE", "dev")
        .env("NO_BUILD", "1")
        .output()
        .unwrap();
    assert!(o.status.success(), "build.sh: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let deb = std::fs::read_dir(out.path()).unwrap().map(|e| e.unwrap().path()).find(|p| p.extension().is_some_and(|e| e == "deb")).expect("a .deb");

    let listing = String::from_utf8_lossy(&Command::new("dpkg-deb").arg("-c").arg(&deb).output().unwrap().stdout).into_owned();
    let mut want = vec![
        "./usr/bin/fwc".to_string(),
        "./usr/lib/systemd/system/fwc-agent.service".into(),
        "./usr/share/bash-completion/completions/fwc".into(),
        "./usr/share/zsh/vendor-completions/_fwc".into(),
        "./usr/share/fish/vendor_completions.d/fwc.fish".into(),
        "./usr/share/doc/fwc/copyright".into(),
        "./usr/share/doc/fwc/changelog.Debian.gz".into(),
        "./usr/share/doc/fwc/fleet.md".into(),
        "./usr/share/fwc/prometheus/fwc-alerts.yml".into(),
    ];
    let mut pages = Vec::new();
    visible_commands(&<fwc_runtime::cli::Cli as clap::CommandFactory>::command(), "fwc", &mut pages);
    want.extend(pages.iter().map(|p| format!("./usr/share/man/man1/{p}.1.gz")));
    for w in &want {
        assert!(listing.lines().any(|l| l.ends_with(&format!(" {w}"))), "{w} missing from the .deb:\n{listing}");
    }

    let o = Command::new("lintian").arg(&deb).output().unwrap();
    let report = String::from_utf8_lossy(&o.stdout);
    let errors: Vec<&str> = report.lines().filter(|l| l.starts_with("E:")).collect();
    assert!(errors.is_empty(), "lintian errors:\n{report}{}", String::from_utf8_lossy(&o.stderr));

    // Install into a scratch root (an empty dpkg database), run it, remove it.
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    for d in ["var/lib/dpkg/info", "var/lib/dpkg/updates"] {
        std::fs::create_dir_all(r.join(d)).unwrap();
    }
    std::fs::write(r.join("var/lib/dpkg/status"), "").unwrap();
    let dpkg = |args: &[&str]| {
        let o = Command::new("dpkg").arg(format!("--root={}", r.display())).args(["--force-depends", "--log=/dev/null"]).args(args).output().unwrap();
        assert!(o.status.success(), "dpkg {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    };
    dpkg(&["-i", deb.to_str().unwrap()]);
    let o = Command::new(r.join("usr/bin/fwc")).arg("--version").output().unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), format!("fwc {}", env!("CARGO_PKG_VERSION")));
    let unit = std::fs::read_to_string(r.join("usr/lib/systemd/system/fwc-agent.service")).unwrap();
    assert_eq!(unit, std::fs::read_to_string(repo_root().join("packaging/systemd/fwc-agent.service")).unwrap());
    dpkg(&["-r", "fwc"]);
    assert!(!r.join("usr/bin/fwc").exists(), "dpkg -r leaves the binary behind");
}

/// The agent image: packaging/container/test.sh builds the Containerfile's runtime stage with
/// podman around this test's binary (base image made by debootstrap when no registry is
/// reachable) and runs the image's `fwc --version` and `fwc check` (good and broken repo); then
/// packaging/container/pod-test.sh runs it as fwc-agent-daemonset.yaml's pod container (the
/// manifest's capabilities, a scratch namespace for hostNetwork, a fresh bpffs for the bpffs
/// hostPath, `fwc agent --once` on a signed commit) and checks from outside that the table,
/// the QoS pins and the TCX link are there, that /proc/sys without the init container fails
/// naming the sysctl, and that each capability is needed.
/// About 1.5 min the first time on a machine (debootstrap), 30 s after.
#[test]
fn the_container_image_builds_and_runs_fwc_check() {
    let name = "the_container_image_builds_and_runs_fwc_check";
    if !fwc_testkit::privileged(name)
        || !fwc_testkit::tool(name, "podman", "podman")
        || !fwc_testkit::tool(name, "runc", "runc")
        || !fwc_testkit::tool(name, "debootstrap", "debootstrap")
        || !fwc_testkit::tool(name, "bpftool", "bpftool")
        || !fwc_testkit::tool(name, "git", "git")
        || !fwc_testkit::tool(name, "ssh-keygen", "openssh-client")
        || !fwc_testkit::tool(name, "python3", "python3")
    {
        return;
    }
    let o = Command::new(repo_root().join("packaging/container/test.sh")).env("FWC", env!("CARGO_BIN_EXE_fwc")).output().unwrap();
    let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "packaging/container/test.sh failed:\n{out}");
    assert!(out.contains(&format!("container: fwc {}", env!("CARGO_PKG_VERSION"))), "{out}");
    for want in [
        "pod: capabilities NET_ADMIN,SYS_ADMIN,NET_BIND_SERVICE",
        "cannot set net.ipv4.ip_forward=1 (/proc/sys/net/ipv4/ip_forward): Read-only file system",
        "pod: without CAP_NET_BIND_SERVICE: reason=forwarder prepare failed: cannot bind: tls (tcp [::]:443): Permission denied",
        "pod: after the init container: exit 0",
        "pod test: ok",
        "container test: ok",
    ] {
        assert!(out.contains(want), "no {want:?} in:\n{out}");
    }
}
