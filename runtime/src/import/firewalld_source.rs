//! Reading firewalld (the I/O edge of `fwc import --from firewalld`): its configuration
//! directory and the system's definitions as texts, and the ruleset firewalld itself builds
//! from them — the real firewalld, on a copy, in a scratch network and mount namespace with a
//! private D-Bus system bus, listed with `nft -j list ruleset` and stopped again.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::firewalld::Config;
use super::error::ImportError;

/// Where firewalld keeps its system definitions (services, zones, policies, icmptypes).
pub const DEFAULT_LIB: &str = "/usr/lib/firewalld";

fn err(what: String, hint: &str) -> ImportError {
    ImportError::Source { what, hint: hint.into() }
}

/// The firewalld binary, if installed (`FWC_FIREWALLD` names the one to use instead).
pub fn binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FWC_FIREWALLD") {
        return Some(PathBuf::from(p)).filter(|p| p.exists());
    }
    ["/usr/sbin/firewalld", "/usr/bin/firewalld", "/sbin/firewalld"].map(PathBuf::from).into_iter().find(|p| p.exists())
}

/// Read `dir` (the operator's /etc/firewalld) over `lib` (the system's definitions).
pub fn read_config(dir: &Path, lib: &Path) -> Result<(Config, Vec<String>), ImportError> {
    if !dir.is_dir() {
        return Err(err(format!("{} is not a directory", dir.display()), "give firewalld's configuration directory, /etc/firewalld"));
    }
    let mut cfg = Config { conf: std::fs::read_to_string(dir.join("firewalld.conf")).unwrap_or_default(), ..Default::default() };
    let mut notes = Vec::new();
    if !lib.join("services").is_dir() {
        notes.push(format!("{} holds no system definitions (services/): only the services under {}/services are known (install firewalld, or give --firewalld-lib)", lib.display(), dir.display()));
    }
    for (root, mine) in [(lib, false), (dir, true)] {
        for kind in ["zones", "services", "policies", "ipsets"] {
            let Ok(rd) = std::fs::read_dir(root.join(kind)) else { continue };
            let mut names: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "xml")).collect();
            names.sort();
            for p in names {
                let file = p.file_name().unwrap_or_default().to_string_lossy().into_owned();
                let text = std::fs::read_to_string(&p).map_err(|e| err(format!("cannot read {}: {e}", p.display()), ""))?;
                let rel = format!("{kind}/{file}");
                let label = if mine { rel.clone() } else { p.display().to_string() };
                check_xml(&label, &text)?;
                cfg.files.insert(rel, (label, text));
            }
        }
    }
    if !cfg.files.keys().any(|k| k.starts_with("zones/")) {
        return Err(err(format!("{} holds no zones (zones/*.xml), nor does {}", dir.display(), lib.display()), "give firewalld's configuration directory, /etc/firewalld (and its system definitions with --firewalld-lib)"));
    }
    Ok((cfg, notes))
}

/// A file firewalld's own parser would choke on, refused before firewalld runs (it expands
/// nested entities without end, and dies with a traceback on an unknown encoding).
fn check_xml(label: &str, text: &str) -> Result<(), ImportError> {
    if let Err(e) = roxmltree::Document::parse(text) {
        return Err(err(format!("{label}: not valid XML for fwc: {e}"), "fix the file; fwc reads no DTD (`<!DOCTYPE …>` with entity declarations, which firewalld's own files never have and whose nested entities keep firewalld's parser busy without end): remove it"));
    }
    let decl = text.trim_start().strip_prefix("<?xml").and_then(|r| r.split_once("?>")).map(|(d, _)| d).unwrap_or_default();
    if let Some(enc) = decl.split("encoding=").nth(1).and_then(|r| r.trim_start().get(1..)).and_then(|r| r.split(['"', '\'']).next()) {
        if !matches!(enc.to_ascii_lowercase().as_str(), "utf-8" | "utf8" | "us-ascii" | "ascii") {
            return Err(err(format!("{label}:1: encoding \"{enc}\": firewalld reads its files as UTF-8 and stops on another declared encoding"), "declare encoding=\"utf-8\" (and save the file as UTF-8)"));
        }
    }
    Ok(())
}

/// A private firewalld with its own D-Bus system bus, in a scratch network + mount namespace
/// (or in network namespace `netns`). Stopped, with its bus, on drop.
pub struct Daemon {
    child: Child,
    dir: tempfile::TempDir,
}

/// The private bus: its socket in the scratch directory; everyone may own and call.
const BUS_CONF: &str = r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=@DIR@/bus</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="org.fedoraproject.FirewallD1"/>
    <allow own="org.fedoraproject.FirewallD1.config"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"#;

/// dbus-daemon in the background (its pid in dbus.pid), then firewalld in the foreground
/// (the child itself), logging to `log`.
const SCRIPT: &str = r#"set -e
D="$1"; FW="$2"; LIB="$3"
# The bus dies with firewalld (setpriv: util-linux), firewalld with fwc (PR_SET_PDEATHSIG below).
if command -v setpriv >/dev/null 2>&1; then P="setpriv --pdeathsig TERM"; else P=""; fi
$P dbus-daemon --config-file="$D/bus.conf" --nofork --nopidfile --nosyslog 2>"$D/dbus.log" &
echo $! > "$D/dbus.pid"
i=0; while [ ! -S "$D/bus" ]; do i=$((i+1)); [ $i -lt 400 ] || { echo "dbus-daemon did not start" >&2; exit 1; }; sleep 0.05; done
# A private /run (this mount namespace only), so nothing firewalld writes there reaches the host.
mount -t tmpfs fwc-t-run /run 2>/dev/null || true
export DBUS_SYSTEM_BUS_ADDRESS="unix:path=$D/bus"
exec "$FW" --nofork --nopid --system-config "$D/etc" --default-config "$LIB" --log-target file --log-file "$D/log" --debug 1
"#;

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let t = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &t)?;
        } else if e.file_type()?.is_file() {
            std::fs::copy(e.path(), &t)?;
        }
    }
    Ok(())
}

impl Daemon {
    /// Start firewalld on a copy of `config` (firewalld.conf with IPv6_rpfilter=no and the
    /// nftables backend) and wait until it has applied its configuration.
    pub fn start(config: &Path, lib: &Path, netns: Option<&str>) -> Result<Daemon, ImportError> {
        let fw = binary().ok_or_else(|| err("the proof needs firewalld, which is not installed".into(), NEED_FIREWALLD))?;
        for tool in ["dbus-daemon", "nsenter", "unshare"] {
            if !["/usr/bin", "/bin", "/usr/sbin", "/sbin"].iter().any(|d| Path::new(d).join(tool).exists()) {
                return Err(err(format!("the proof needs {tool}, which is not installed"), "install dbus (dbus-daemon) and util-linux"));
            }
        }
        let dir = tempfile::Builder::new().prefix("fwc-t-firewalld-").tempdir().map_err(|e| err(format!("cannot create a temporary directory: {e}"), ""))?;
        let d = dir.path();
        copy_dir(config, &d.join("etc")).map_err(|e| err(format!("cannot copy {}: {e}", config.display()), ""))?;
        let conf = std::fs::read_to_string(config.join("firewalld.conf")).unwrap_or_default();
        let mut conf: String = conf
            .lines()
            .filter(|l| !["IPv6_rpfilter", "FirewallBackend", "Lockdown", "CleanupOnExit"].iter().any(|k| l.trim_start().starts_with(k)))
            .map(|l| format!("{l}\n"))
            .collect();
        conf.push_str("# fwc import: the proof's copy\nIPv6_rpfilter=no\nFirewallBackend=nftables\nLockdown=no\nCleanupOnExit=yes\n");
        // firewalld's own default, said aloud (without it firewalld logs an ERROR the import
        // would pass on as a complaint about the configuration).
        if !conf.lines().any(|l| l.trim_start().starts_with("DefaultZone")) {
            conf.push_str("DefaultZone=public\n");
        }
        std::fs::write(d.join("etc/firewalld.conf"), conf).map_err(|e| err(format!("cannot write the copy's firewalld.conf: {e}"), ""))?;
        std::fs::write(d.join("bus.conf"), BUS_CONF.replace("@DIR@", &d.display().to_string())).map_err(|e| err(format!("cannot write bus.conf: {e}"), ""))?;
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "unshare", "-m", "--propagation", "private"]);
                c
            }
            None => {
                let mut c = Command::new("unshare");
                c.args(["-n", "-m", "--propagation", "private"]);
                c
            }
        };
        cmd.args(["sh", "-c", SCRIPT, "sh"]).arg(d).arg(&fw).arg(lib);
        // Never an orphaned firewalld: it gets SIGTERM when the thread that started it ends.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().map_err(|e| err(format!("cannot start firewalld: {e}"), NEED_FIREWALLD))?;
        let mut me = Daemon { child, dir };
        me.wait_loaded()?;
        Ok(me)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }

    /// firewalld logs `Setting policy to 'ACCEPT'` once it has applied zones and policies.
    fn wait_loaded(&mut self) -> Result<(), ImportError> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let log = self.log();
            // firewalld does not stop on a configuration it cannot load: it runs its stock one.
            if log.contains("Failed to load user configuration") {
                // Its reason (PARSE_ERROR: …) follows the fallback line.
                std::thread::sleep(Duration::from_millis(500));
                // firewalld skips an option it does not know (another version's) and goes on:
                // never the reason, said apart.
                let (other_version, mut why): (Vec<String>, Vec<String>) = self.complaints().into_iter().filter(|c| !c.contains("Falling back to full stock")).partition(|c| c.contains("Invalid option: '"));
                // Without an ERROR line (a Python traceback), its last line is the reason.
                if why.is_empty() {
                    why.extend(self.log().lines().rev().map(str::trim).find(|l| l.contains("Error") || l.contains("Exception")).map(str::to_string));
                }
                if why.is_empty() {
                    why.push("firewalld's log names no reason (it logs none for an undefined service, zone or ipset a zone or policy refers to)".into());
                }
                let also = if other_version.is_empty() {
                    String::new()
                } else {
                    let opts: Vec<&str> = other_version.iter().filter_map(|c| c.split_once("Invalid option: '").map(|(_, o)| o.trim_end_matches('\''))).collect();
                    format!(" (besides, firewalld.conf names options of another firewalld version, which this one ignores: {})", opts.join(", "))
                };
                return Err(err(format!("firewalld refused the configuration (and fell back to its stock one): {}{also}", why.join("; ")), "check it with `firewall-offline-cmd --check-config` (a zone's target is one of default, ACCEPT, DROP, %%REJECT%%)"));
            }
            if let Some(i) = log.find("Applying used policies") {
                if log[i..].contains("Setting policy to 'ACCEPT'") {
                    return Ok(());
                }
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                let mut stderr = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    use std::io::Read;
                    let _ = e.read_to_string(&mut stderr);
                }
                let tail: Vec<&str> = log.lines().filter(|l| l.contains("ERROR") || l.contains("Traceback") || l.contains("Error")).take(5).collect();
                return Err(err(format!("firewalld stopped before it had loaded the configuration ({status}): {}{}", stderr.trim(), tail.join("; ")), "firewalld must load the configuration itself: check it with `firewall-offline-cmd --check-config`"));
            }
            if Instant::now() > deadline {
                let last = self.log().lines().rev().map(str::trim).find(|l| !l.is_empty()).unwrap_or("nothing").to_string();
                return Err(err(format!("firewalld did not load the configuration within 120 s (the last it said: {last})"), "check the configuration with `firewall-offline-cmd --check-config`; a file with nested entity declarations keeps firewalld's parser busy"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What firewalld said about the configuration (its WARNING and ERROR lines).
    pub fn complaints(&self) -> Vec<String> {
        self.log().lines().filter(|l| l.contains(" WARNING: ") || l.contains(" ERROR: ")).map(|l| l.split_once(' ').and_then(|(_, r)| r.split_once(' ')).map_or(l, |(_, r)| r).trim().to_string()).collect()
    }

    /// `nft -j list ruleset` in firewalld's namespace.
    pub fn listing(&self) -> Result<Value, ImportError> {
        let out = Command::new("nsenter")
            .args(["-t", &self.child.id().to_string(), "-n", "nft", "-j", "list", "ruleset"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| err(format!("cannot run nft in firewalld's namespace: {e}"), "install nftables"))?;
        if !out.status.success() {
            return Err(err(format!("nft -j list ruleset in firewalld's namespace failed: {}", String::from_utf8_lossy(&out.stderr).trim()), ""));
        }
        let mut de = serde_json::Deserializer::from_slice(&out.stdout).into_iter::<Value>();
        match de.next() {
            Some(Ok(v)) => Ok(v),
            _ => Err(err("nft -j list ruleset printed no JSON".into(), "check `nft --version` (1.0 or newer)")),
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // firewalld first (it removes its table on SIGTERM), then its bus.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(pid) = std::fs::read_to_string(self.dir.path().join("dbus.pid")).ok().and_then(|p| p.trim().parse::<i32>().ok()) {
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
    }
}

/// What to do when firewalld is missing.
pub const NEED_FIREWALLD: &str = "the proof (tests/imported.kdl, --verify) compares with the ruleset firewalld itself builds: install it without starting it (`printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; apt-get install --no-install-recommends firewalld; systemctl mask firewalld`, see scripts/setup.sh), or import without a proof with --skip-proof";

/// The ruleset firewalld builds from `config` (started and stopped here), with its complaints.
pub fn ruleset(config: &Path, lib: &Path) -> Result<(Value, Vec<String>), ImportError> {
    let d = Daemon::start(config, lib, None)?;
    let listing = d.listing()?;
    let version = Command::new("firewalld").arg("--version").stdin(Stdio::null()).output().ok().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).filter(|v| !v.is_empty());
    Ok((listing, d.complaints().iter().map(|c| version_difference(c, version.as_deref())).collect()))
}

/// firewalld ignores a `firewalld.conf` option it does not know (`Invalid option:
/// 'ReloadPolicy=INPUT:DROP'`): a setting of another firewalld version, said so; other
/// complaints as they are.
pub fn version_difference(complaint: &str, version: Option<&str>) -> String {
    let Some(opt) = complaint.split_once("Invalid option: '").and_then(|(_, r)| r.strip_suffix('\'')) else {
        return complaint.to_string();
    };
    let key = opt.split('=').next().unwrap_or(opt).trim();
    let this = version.map_or_else(|| "this host's firewalld".to_string(), |v| format!("this host's firewalld {v}"));
    format!("firewalld.conf: `{opt}` is not an option of {this}: a setting of another firewalld version, which the proof's firewalld ignores — the original host's firewalld may apply it ({key}); compare its ruleset with `fwc import --from nft --live` there")
}
