//! Reading the original firewall (the I/O edge of `fwc import`): a ruleset file is loaded by
//! nft itself into a scratch network namespace (`unshare -n`: includes, variables and defines
//! are resolved by nft, nothing touches the host) and listed back as JSON; an iptables-save
//! file goes through iptables-nft's own translation there; `--live` lists the host's (or a
//! namespace's) ruleset. Each rule's origin (file:line) comes from a scan of the file.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use super::error::ImportError;
pub use super::model::XT_MARK;
use super::model::Origins;

fn run(cmd: &mut Command, what: &str) -> Result<String, ImportError> {
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| ImportError::Source { what: format!("cannot run {what}: {e}"), hint: "install nftables, iptables and util-linux (unshare)".into() })?;
    if !out.status.success() {
        return Err(ImportError::Source {
            what: format!("{what} failed: {}", String::from_utf8_lossy(&out.stderr).trim()),
            hint: "the original must load with its own tool (nft -f / iptables-restore); fix it there first. Reading a file needs root (a scratch network namespace)".into(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The first JSON document of nft's output (it may print `# Warning: …` lines after it).
fn first_json(text: &str) -> Result<Value, ImportError> {
    let mut de = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    match de.next() {
        Some(Ok(v)) => Ok(v),
        _ => Err(ImportError::Source { what: "nft -j list ruleset printed no JSON".into(), hint: "check `nft --version` (1.0 or newer)".into() }),
    }
}

/// Load an `nft -f` file in a scratch namespace and list it as JSON.
pub fn nft_file(path: &Path) -> Result<(Value, Origins), ImportError> {
    let text = std::fs::read_to_string(path).map_err(|e| ImportError::Source { what: format!("cannot read {}: {e}", path.display()), hint: "give the ruleset file (e.g. /etc/nftables.conf)".into() })?;
    // Interfaces named by index (`iif "wan0"`) must exist for nft to load the file: links of
    // those names in the scratch namespace stand in for the host's.
    // A dummy link where the kernel has the module, else a bridge (always built in).
    let script = format!("{BIND_IDS}f=\"$1\"; shift; for n in \"$@\"; do ip link add \"$n\" type dummy 2>/dev/null || ip link add \"$n\" type bridge 2>/dev/null; done; nft -f \"$f\" && nft -j list ruleset");
    let ids = ScratchIds::for_text(&text)?;
    let out = run(
        ids.apply(Command::new("unshare").args(["-m", "-n", "sh", "-c", &script, "sh"]).arg(path).args(super::ifnames::by_index(&text))),
        &format!("nft -f {} (in a scratch network namespace)", path.display()),
    )?;
    let listing = first_json(&out)?;
    let origins = nft_origins(&text, &file_label(path), &listing);
    Ok((listing, origins))
}

/// Shell lines that bind the import's own `/etc/passwd` and `/etc/group` (with the names the
/// original refers to and this host lacks) over the real ones, in the scratch mount namespace.
const BIND_IDS: &str = "[ -n \"$FWC_IMPORT_PASSWD\" ] && mount --bind \"$FWC_IMPORT_PASSWD\" /etc/passwd; [ -n \"$FWC_IMPORT_GROUP\" ] && mount --bind \"$FWC_IMPORT_GROUP\" /etc/group; ";

/// The user and group databases of the scratch mount namespace, when the original names users
/// or groups this host does not have (see [`super::owners`]).
struct ScratchIds {
    _dir: Option<tempfile::TempDir>,
    passwd: Option<std::path::PathBuf>,
    group: Option<std::path::PathBuf>,
}

impl ScratchIds {
    fn for_text(text: &str) -> Result<ScratchIds, ImportError> {
        let (users, groups) = super::owners::named(text);
        let passwd = super::owners::with_entries(&std::fs::read_to_string("/etc/passwd").unwrap_or_default(), &users, false);
        let group = super::owners::with_entries(&std::fs::read_to_string("/etc/group").unwrap_or_default(), &groups, true);
        if passwd.is_none() && group.is_none() {
            return Ok(ScratchIds { _dir: None, passwd: None, group: None });
        }
        let dir = tempfile::tempdir().map_err(|e| ImportError::Source { what: format!("cannot create a temporary directory: {e}"), hint: String::new() })?;
        let write = |name: &str, text: Option<String>| -> Result<Option<std::path::PathBuf>, ImportError> {
            let Some(t) = text else { return Ok(None) };
            let p = dir.path().join(name);
            std::fs::write(&p, t).map_err(|e| ImportError::Source { what: format!("cannot write {}: {e}", p.display()), hint: String::new() })?;
            Ok(Some(p))
        };
        let (passwd, group) = (write("passwd", passwd)?, write("group", group)?);
        Ok(ScratchIds { _dir: Some(dir), passwd, group })
    }

    fn apply<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        cmd.env("FWC_IMPORT_PASSWD", self.passwd.as_deref().unwrap_or(Path::new(""))).env("FWC_IMPORT_GROUP", self.group.as_deref().unwrap_or(Path::new("")))
    }
}

/// Load iptables-save / ip6tables-save output with iptables-nft in a scratch namespace; the
/// rules nft lists there (translated by iptables-nft and libxtables) are loaded again into a
/// second scratch namespace so the JSON holds native expressions, not opaque `xt` matches.
pub fn iptables_files(files: &[(std::path::PathBuf, bool)]) -> Result<(Value, Origins), ImportError> {
    let mut script = String::new();
    let mut args = Vec::new();
    for (i, (p, v6)) in files.iter().enumerate() {
        script.push_str(&format!("{} < \"${}\" && ", if *v6 { "ip6tables-nft-restore" } else { "iptables-nft-restore" }, i + 1));
        args.push(p.clone());
    }
    script.push_str("nft list ruleset");
    let all: String = files.iter().filter_map(|(p, _)| std::fs::read_to_string(p).ok()).collect::<Vec<_>>().join("\n");
    let ids = ScratchIds::for_text(&all)?;
    let script = format!("{BIND_IDS}{script}");
    let text = run(ids.apply(Command::new("unshare").args(["-m", "-n", "sh", "-c", &script, "sh"]).args(&args)), "iptables-nft-restore (in a scratch network namespace)")?;
    let mut origins = BTreeMap::new();
    let mut originals = BTreeMap::new();
    for (p, v6) in files {
        let content = std::fs::read_to_string(p).map_err(|e| ImportError::Source { what: format!("cannot read {}: {e}", p.display()), hint: String::new() })?;
        origins.extend(iptables_origins(&content, &file_label(p), if *v6 { "ip6" } else { "ip" }));
        originals.insert(file_label(p), content);
    }
    let out = reload(&text, &origins, &originals)?;
    let listing = first_json(&out)?;
    Ok((listing, origins))
}

/// Load `nft list ruleset` text again into a scratch namespace and list it as JSON: what
/// iptables-nft and libxtables translated becomes native expressions (an `xt` match nft
/// cannot print as nftables is refused by `nft -f`, naming it).
fn reload(text: &str, origins: &Origins, originals: &BTreeMap<String, String>) -> Result<String, ImportError> {
    let dir = tempfile::tempdir().map_err(|e| ImportError::Source { what: format!("cannot create a temporary directory: {e}"), hint: String::new() })?;
    let nftfile = dir.path().join("translated.nft");
    // An ICMP match iptables-nft kept as `xt match icmp`/`icmp6` (a numeric type, a code) is
    // read from the original line as the nftables match it is. Any other match iptables-nft
    // could not translate (`xt match recent`, …) cannot be loaded again: keep its place as a
    // rule that only counts, with the original in its comment, so the translation refuses it
    // by name and the rules after it keep their positions (and origins).
    let places = rule_places(text);
    let text: String = text
        .lines()
        .enumerate()
        .map(|(n, l)| {
            if let Some(native) = xt_icmp_line(l, places.get(n).cloned().flatten(), origins, originals) {
                format!("{native}\n")
            } else if l.contains(" xt match ") || l.contains(" xt target ") || l.trim_start().starts_with("xt ") {
                let indent: String = l.chars().take_while(|c| c.is_whitespace()).collect();
                let mut what: String = l.trim().replace('"', "'").replace("counter packets 0 bytes 0 ", "");
                what.truncate(100);
                format!("{indent}counter comment \"{XT_MARK}{what}\"\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    std::fs::write(&nftfile, &text).map_err(|e| ImportError::Source { what: format!("cannot write {}: {e}", nftfile.display()), hint: String::new() })?;
    let out = Command::new("unshare").args(["-n", "sh", "-c", "nft -f \"$1\" && nft -j list ruleset", "sh"]).arg(&nftfile).stdin(Stdio::null()).output();
    match out {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).into_owned()),
        Ok(o) => Err(unreadable_translation(&text, &String::from_utf8_lossy(&o.stderr), origins)),
        Err(e) => Err(ImportError::Source { what: format!("cannot run nft: {e}"), hint: "install nftables and util-linux (unshare)".into() }),
    }
}

/// nft refused to read back iptables-nft's translation (a reversed `--src-range`, a chain name
/// nft's parser does not take): name the original's line, not the temporary file's.
fn unreadable_translation(text: &str, stderr: &str, origins: &Origins) -> ImportError {
    let first = stderr.lines().find_map(|l| {
        let (_, rest) = l.split_once("translated.nft:")?;
        let line: usize = rest.split(':').next()?.parse().ok()?;
        let why = rest.split_once("Error: ").map_or(rest, |(_, w)| w).trim().to_string();
        Some((line, why))
    });
    let Some((line, why)) = first else {
        return ImportError::Source { what: format!("nftables cannot read back iptables-nft's translation: {}", stderr.trim()), hint: "iptables-restore loads the file, but fwc reads it through nftables: rewrite the rule nft names".into() };
    };
    let code = text.lines().nth(line.saturating_sub(1)).unwrap_or_default().trim().replace("counter packets 0 bytes 0 ", "");
    let place = rule_places(text).get(line.saturating_sub(1)).cloned().flatten();
    let at = match place {
        Some(key) => origins.get(&key).cloned().unwrap_or_else(|| format!("chain {}", key.2)),
        None => "the original".into(),
    };
    ImportError::Source {
        what: format!("{at}: iptables-nft translates this to `{code}`, which nftables cannot read back: {why}"),
        hint: "iptables-restore loads it, but fwc reads the rules through nftables: rewrite that rule or chain name (a range low-high, an ASCII chain name) and import again".into(),
    }
}

/// For each line of `nft list ruleset` text: the rule it holds, as (family, table, chain,
/// index in the chain) — the key of [`Origins`].
fn rule_places(text: &str) -> Vec<Option<(String, String, String, usize)>> {
    let (mut table, mut chain, mut index) = (None::<(String, String)>, None::<String>, 0usize);
    let mut out = Vec::new();
    for l in text.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        let mut place = None;
        match w.as_slice() {
            ["table", fam, name, "{"] => table = Some((fam.to_string(), name.to_string())),
            ["chain", name, "{"] => {
                chain = Some(name.to_string());
                index = 0;
            }
            ["type", ..] | ["policy", ..] | ["}"] | [] => {}
            _ => {
                if let (Some((f, t)), Some(c)) = (&table, &chain) {
                    place = Some((f.clone(), t.clone(), c.clone(), index));
                }
                index += 1;
            }
        }
        out.push(place);
    }
    out
}

/// A listed rule with iptables-nft's `xt match icmp`/`icmp6`, its ICMP match written as
/// nftables from the original iptables line (see [`super::xt_icmp`]); `None` for any other line
/// or one that cannot be read so.
fn xt_icmp_line(l: &str, place: Option<(String, String, String, usize)>, origins: &Origins, originals: &BTreeMap<String, String>) -> Option<String> {
    let xt = [" xt match \"icmp\"", " xt match \"icmp6\"", " xt match icmp ", " xt match icmp6 "].into_iter().find(|x| l.contains(x))?;
    if l.matches(" xt ").count() != 1 {
        return None;
    }
    let origin = origins.get(&place?)?;
    let (label, line) = origin.rsplit_once(':')?;
    let line: usize = line.parse().ok()?;
    let original = originals.get(label)?.lines().nth(line.checked_sub(1)?)?;
    let native = super::xt_icmp::native(original)?;
    Some(l.replacen(xt.trim_end(), &format!(" {native}"), 1))
}


/// ufw's configuration (`/etc/ufw`, with `/etc/default/ufw` beside it when present), loaded
/// by ufw's own `ufw-init` into a scratch namespace, so its framework chains, before/after
/// rules and default policies are exactly what ufw builds. `limit` rules count connections per
/// source with `-m recent`, which nftables cannot express: they are rewritten to a rate on
/// the rule (noted). Returns the listing, the origins and notes.
pub fn ufw_dir(dir: &Path) -> Result<(Value, Origins, Vec<String>), ImportError> {
    let err = |what: String, hint: &str| ImportError::Source { what, hint: hint.into() };
    let init = std::env::var_os("FWC_UFW_INIT")
        .map(std::path::PathBuf::from)
        .into_iter()
        .chain(["/usr/lib/ufw/ufw-init", "/lib/ufw/ufw-init"].map(std::path::PathBuf::from))
        .find(|p| p.exists())
        .ok_or_else(|| err("ufw's ufw-init is not installed".into(), "install the Debian package ufw (fwc runs ufw's own loader in a scratch network namespace)"))?;
    let functions = init.with_file_name("ufw-init-functions");
    let tmp = tempfile::tempdir().map_err(|e| err(format!("cannot create a temporary directory: {e}"), ""))?;
    let root = tmp.path();
    let mkdir = |p: &Path| std::fs::create_dir_all(p).map_err(|e| err(format!("cannot create {}: {e}", p.display()), ""));
    mkdir(&root.join("etc/ufw"))?;
    mkdir(&root.join("etc/default"))?;
    mkdir(&root.join("lib/ufw"))?;
    let copy = |from: &Path, to: &Path, text: Option<String>| -> Result<(), ImportError> {
        let t = match text {
            Some(t) => t,
            None => std::fs::read_to_string(from).map_err(|e| err(format!("cannot read {}: {e}", from.display()), "give ufw's directory, /etc/ufw"))?,
        };
        std::fs::write(to, t).map_err(|e| err(format!("cannot write {}: {e}", to.display()), ""))
    };
    copy(&functions, &root.join("lib/ufw/ufw-init-functions"), None)?;
    let conf = std::fs::read_to_string(dir.join("ufw.conf")).unwrap_or_default();
    let loglevel = conf.lines().find_map(|l| l.trim().strip_prefix("LOGLEVEL=")).unwrap_or("low").to_string();
    copy(Path::new(""), &root.join("etc/ufw/ufw.conf"), Some(format!("ENABLED=yes\nLOGLEVEL={loglevel}\n")))?;
    let defaults = [dir.join("../default/ufw"), dir.join("default")].into_iter().find(|p| p.is_file());
    let mut default_text = match &defaults {
        Some(p) => std::fs::read_to_string(p).map_err(|e| err(format!("cannot read {}: {e}", p.display()), ""))?,
        None => "IPV6=yes\nDEFAULT_INPUT_POLICY=\"DROP\"\nDEFAULT_OUTPUT_POLICY=\"ACCEPT\"\nDEFAULT_FORWARD_POLICY=\"DROP\"\n".into(),
    };
    // Nothing outside the namespace: no sysctls, no modules, no builtin flush.
    default_text.push_str("\nIPT_SYSCTL=\nIPT_MODULES=\"\"\nMANAGE_BUILTINS=no\n");
    copy(Path::new(""), &root.join("etc/default/ufw"), Some(default_text))?;
    let mut origins = BTreeMap::new();
    let mut originals = BTreeMap::new();
    let mut notes = Vec::new();
    let mut any = false;
    for (name, family) in [("before.rules", "ip"), ("after.rules", "ip"), ("user.rules", "ip"), ("before6.rules", "ip6"), ("after6.rules", "ip6"), ("user6.rules", "ip6")] {
        let from = dir.join(name);
        let Ok(text) = std::fs::read_to_string(&from) else { continue };
        any = true;
        let text = if name.starts_with("user") { ufw_limits(&text, name, &mut notes) } else { text };
        origins.extend(iptables_origins(&text, name, family));
        copy(&from, &root.join("etc/ufw").join(name), Some(text.clone()))?;
        originals.insert(name.to_string(), text);
    }
    if !any {
        return Err(err(format!("{} holds no ufw rules (before.rules, user.rules, …)", dir.display()), "give ufw's directory, /etc/ufw"));
    }
    for hook in ["before.init", "after.init"] {
        if dir.join(hook).exists() {
            notes.push(format!("{hook}: ufw's hook script is not run by the import (it may add rules of its own: import them by hand)"));
        }
    }
    let text = run(
        Command::new("unshare").args(["-n", "sh", "-c", "\"$1\" --rootdir \"$2\" --datadir \"$2\" start >&2 && nft list ruleset", "sh"]).arg(&init).arg(root),
        "ufw-init start (in a scratch network namespace)",
    )?;
    let listing = first_json(&reload(&text, &origins, &originals)?)?;
    Ok((listing, origins, notes))
}

/// ufw's `limit`: `-m recent --set` and `--update --seconds S --hitcount H -j ufw-user-limit`
/// before `-j ufw-user-limit-accept` become a rate per source address on the accept (`-m
/// hashlimit --hashlimit-upto H/S --hashlimit-burst H --hashlimit-mode srcip`, which nftables
/// lists as a meter keyed by the source), read as `rate-per-source=` (line numbers kept: the
/// removed lines become comments).
pub fn ufw_limits(text: &str, file: &str, notes: &mut Vec<String>) -> String {
    let mut out = Vec::new();
    let mut pending: Option<(u64, u64)> = None;
    for (n, line) in text.lines().enumerate() {
        if line.contains("-m recent") && line.contains("--set") {
            out.push("# fwc import: ufw limit, see below".to_string());
            continue;
        }
        if line.contains("-m recent") && line.contains("--update") {
            let num = |flag: &str| line.split_whitespace().skip_while(|w| *w != flag).nth(1).and_then(|v| v.parse::<u64>().ok());
            pending = num("--seconds").zip(num("--hitcount"));
            out.push("# fwc import: ufw limit, see below".to_string());
            continue;
        }
        if let (Some((secs, hits)), true) = (pending, line.contains("-user-limit-accept")) {
            let rate = if (hits * 60) % secs.max(1) == 0 { format!("{}/minute", hits * 60 / secs.max(1)) } else { format!("{}/hour", hits * 3600 / secs.max(1)) };
            notes.push(format!(
                "{file}:{}: ufw `limit` ({hits} new connections in {secs} s per source address, then reject) imported as rate-per-source=\"{rate} burst {hits}\" (over it: dropped, where ufw rejects)",
                n + 1
            ));
            let hashlimit = format!(" -m hashlimit --hashlimit-upto {rate} --hashlimit-burst {hits} --hashlimit-mode srcip --hashlimit-name ufw-limit-{} -j ", n + 1);
            out.push(line.replacen(" -j ", &hashlimit, 1));
            pending = None;
            continue;
        }
        out.push(line.to_string());
    }
    out.join("\n") + "\n"
}

/// The live ruleset of this host or of network namespace `netns`.
pub fn live(netns: Option<&str>) -> Result<Value, ImportError> {
    let out = match netns {
        Some(ns) => run(Command::new("ip").args(["netns", "exec", ns, "nft", "-j", "list", "ruleset"]), &format!("nft -j list ruleset in network namespace {ns}"))?,
        None => run(Command::new("nft").args(["-j", "list", "ruleset"]), "nft -j list ruleset")?,
    };
    first_json(&out)
}

/// [`live`] with native expressions only: rules iptables-nft added are listed by `nft -j` with
/// opaque `xt` statements (even `-m conntrack`); their text is loaded again into a scratch
/// namespace, as an iptables file's is. A match nftables cannot read back stays a rule marked
/// [`XT_MARK`].
pub fn live_native(netns: Option<&str>) -> Result<Value, ImportError> {
    let v = live(netns)?;
    if !v.to_string().contains("{\"xt\":") {
        return Ok(v);
    }
    let text = match netns {
        Some(ns) => run(Command::new("ip").args(["netns", "exec", ns, "nft", "list", "ruleset"]), &format!("nft list ruleset in network namespace {ns}"))?,
        None => run(Command::new("nft").args(["list", "ruleset"]), "nft list ruleset")?,
    };
    let mut native = first_json(&reload(&text, &BTreeMap::new(), &BTreeMap::new())?)?;
    keep_handles(&v, &mut native);
    Ok(native)
}

/// The copy read back gets handles of its own: give each rule the handle of the rule at the
/// same place in the host's listing (same table, chain and position), which is how a `--live`
/// import names a rule's origin.
fn keep_handles(host: &Value, copy: &mut Value) {
    let key = |r: &Value| ["family", "table", "chain"].map(|k| r.get(k).and_then(Value::as_str).unwrap_or_default().to_string());
    let mut handles: BTreeMap<[String; 3], std::collections::VecDeque<Value>> = BTreeMap::new();
    for r in host.get("nftables").and_then(Value::as_array).into_iter().flatten().filter_map(|o| o.get("rule")) {
        handles.entry(key(r)).or_default().push_back(r.get("handle").cloned().unwrap_or(Value::Null));
    }
    for o in copy.get_mut("nftables").and_then(Value::as_array_mut).into_iter().flatten() {
        if let Some(r) = o.get_mut("rule") {
            if let Some(h) = handles.get_mut(&key(r)).and_then(|q| q.pop_front()) {
                r["handle"] = h;
            }
        }
    }
}

fn file_label(p: &Path) -> String {
    p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// `-A CHAIN …` lines of an iptables-save file, numbered per (table, chain).
pub fn iptables_origins(text: &str, label: &str, family: &str) -> Origins {
    let mut out = BTreeMap::new();
    let mut table = String::from("filter");
    let mut count: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let l = line.trim();
        if let Some(t) = l.strip_prefix('*') {
            table = t.trim().to_string();
        } else if let Some(rest) = l.strip_prefix("-A ") {
            let chain = rest.split_whitespace().next().unwrap_or_default().to_string();
            let k = count.entry((table.clone(), chain.clone())).or_insert(0);
            out.insert((family.to_string(), table.clone(), chain, *k), format!("{label}:{}", n + 1));
            *k += 1;
        }
    }
    out
}

/// Rule lines of an nft file, mapped to the listing's rules where the counts agree per chain
/// (a file with includes or generated rules falls back to chain and handle).
pub fn nft_origins(text: &str, label: &str, listing: &Value) -> Origins {
    let mut found: BTreeMap<(String, String, String), Vec<usize>> = BTreeMap::new();
    let mut table: Option<(String, String)> = None;
    let mut chain: Option<String> = None;
    let mut depth = 0i32;
    let mut pending: Option<(usize, i32)> = None; // a rule spanning lines: (first line, open braces)
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let opens = line.matches('{').count() as i32;
        let closes = line.matches('}').count() as i32;
        if let Some((first, open)) = pending {
            let open = open + opens - closes;
            pending = if open > 0 { Some((first, open)) } else { None };
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["table", rest @ ..] if table.is_none() => {
                let (fam, name) = match rest {
                    [f, n, ..] if *n != "{" => (f.to_string(), n.to_string()),
                    [n, ..] => ("ip".to_string(), n.to_string()),
                    [] => continue,
                };
                table = Some((fam, name.trim_end_matches('{').to_string()));
                depth = 1;
                continue;
            }
            ["chain", name, ..] if table.is_some() && chain.is_none() => {
                chain = Some(name.trim_end_matches('{').to_string());
                depth = 2;
                continue;
            }
            ["add", "rule", fam, t, c, ..] | ["insert", "rule", fam, t, c, ..] if table.is_none() => {
                found.entry((fam.to_string(), t.to_string(), c.to_string())).or_default().push(n + 1);
                continue;
            }
            _ => {}
        }
        if let (Some((f, t)), Some(c)) = (&table, &chain) {
            if line == "}" {
                chain = None;
                depth = 1;
                continue;
            }
            let head = words.first().copied().unwrap_or_default();
            if !matches!(head, "type" | "policy" | "comment" | "devices" | "flags") {
                found.entry((f.clone(), t.clone(), c.clone())).or_default().push(n + 1);
                if opens > closes {
                    pending = Some((n + 1, opens - closes));
                }
            }
            continue;
        }
        if table.is_some() {
            // Inside a table, outside chains: sets, maps, flowtables (with their own braces).
            depth += opens - closes;
            if depth <= 0 {
                table = None;
                depth = 0;
            }
        }
    }
    let mut counts: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    for o in listing.get("nftables").and_then(Value::as_array).into_iter().flatten() {
        if let Some(r) = o.get("rule") {
            let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
            *counts.entry((s("family"), s("table"), s("chain"))).or_default() += 1;
        }
    }
    let mut out = BTreeMap::new();
    for ((f, t, c), lines) in found {
        if counts.get(&(f.clone(), t.clone(), c.clone())) == Some(&lines.len()) {
            for (i, l) in lines.into_iter().enumerate() {
                out.insert((f.clone(), t.clone(), c.clone(), i), format!("{label}:{l}"));
            }
        }
    }
    out
}
