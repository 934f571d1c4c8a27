//! What an apply needs of the host besides fwc's own state: the interfaces shapes name
//! (`dev=`) and rules name (`in=`/`out=`), and the ports userspace forwards bind. `fwc plan`
//! lists a missing one as a warning; `fwc apply` refuses a missing shape interface or a port
//! another program holds, with the same words (a rule naming an absent interface only never
//! matches until it appears: a warning both times). Pure comparison; the listing of links and
//! listening sockets is the I/O at the edge ([`observe`]).

use std::collections::BTreeSet;
use std::process::Command;

use fwc_compiler::artifacts::{Artifacts, ListenerProto};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One thing the apply needs that the host lacks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Missing {
    /// In words, the same in the plan and in the apply's error.
    pub text: String,
    /// The apply cannot succeed without it (a shape's interface, a userspace forward's port).
    pub blocks_apply: bool,
}

/// The host as the apply will find it: interface names, and the (proto, port) of every
/// listening socket.
#[derive(Debug, Clone, Default)]
pub struct Host {
    pub links: BTreeSet<String>,
    pub listening: BTreeSet<(ListenerProto, u16)>,
}

/// What `next` needs that `host` lacks; `current`: the applied artifacts (the ports their
/// forwarder listens on are fwc's own).
pub fn missing(next: &Artifacts, current: Option<&Artifacts>, host: &Host) -> Vec<Missing> {
    let mut out = Vec::new();
    for c in &next.qos.classes {
        for i in c.interfaces.iter().filter(|i| !host.links.contains(*i)) {
            out.push(Missing { text: format!("shape \"{}\": interface {i} (dev={i}) does not exist here: no interface to shape", c.rule), blocks_apply: true });
        }
    }
    out.dedup();
    // A shape's `dev=` is also its marking rule's interface: named once, as the shape's.
    let shaped: BTreeSet<(&str, &str)> = next.qos.classes.iter().flat_map(|c| c.interfaces.iter().map(|i| (c.rule.as_str(), i.as_str()))).collect();
    for (rule, name) in rule_interfaces(&crate::backend::nft::lazy::skeleton(&next.nftables)) {
        if !host.links.contains(&name) && !shaped.contains(&(rule.as_str(), name.as_str())) {
            out.push(Missing { text: format!("rule \"{rule}\": interface {name} does not exist here: the rule matches nothing until it does"), blocks_apply: false });
        }
    }
    let ours: BTreeSet<(ListenerProto, u16)> = current.map(|c| c.forward.listeners.iter().map(|l| (l.proto, l.listen_port)).collect()).unwrap_or_default();
    let mut seen = BTreeSet::new();
    for l in &next.forward.listeners {
        let key = (l.proto, l.listen_port);
        if host.listening.contains(&key) && !ours.contains(&key) && seen.insert(key) {
            let proto = if l.proto == ListenerProto::Tcp { "tcp" } else { "udp" };
            out.push(Missing {
                text: format!("forward \"{}\": {proto} port {} is already bound by another program: the forwarder cannot listen on it", l.rule, l.listen_port),
                blocks_apply: true,
            });
        }
    }
    out
}

/// (rule name, interface) of every `iifname`/`oifname` match with a plain name (no wildcard).
fn rule_interfaces(doc: &Value) -> BTreeSet<(String, String)> {
    fn names(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) if !s.contains('*') => out.push(s.clone()),
            Value::Object(m) => m.get("set").into_iter().for_each(|s| names(s, out)),
            Value::Array(a) => a.iter().for_each(|x| names(x, out)),
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    for item in doc["nftables"].as_array().into_iter().flatten() {
        let Some(rule) = item.pointer("/add/rule").or_else(|| item.get("rule")) else { continue };
        let Some((_, name)) = crate::backend::nft::rule_label(rule) else { continue };
        for e in rule["expr"].as_array().into_iter().flatten() {
            let Some(m) = e.get("match") else { continue };
            if matches!(m.pointer("/left/meta/key").and_then(Value::as_str), Some("iifname" | "oifname")) {
                let mut found = Vec::new();
                names(&m["right"], &mut found);
                out.extend(found.into_iter().map(|i| (name.clone(), i)));
            }
        }
    }
    out
}

/// The host in `netns` (None: this one): `ip -o link show` and `ss -Hlntu`. What cannot be
/// listed is left empty for that part (no warning rather than a wrong one).
pub fn observe(netns: Option<&str>) -> Option<Host> {
    let run = |argv: &[&str]| -> Option<String> {
        let mut c = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]);
                c.args(argv);
                c
            }
            None => {
                let mut c = Command::new(argv[0]);
                c.args(&argv[1..]);
                c
            }
        };
        let o = c.output().ok()?;
        o.status.success().then(|| String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let links = run(&["ip", "-o", "link", "show"])?;
    let links = links.lines().filter_map(|l| l.split(": ").nth(1)).map(|n| n.split('@').next().unwrap_or(n).to_string()).collect();
    let listening = run(&["ss", "-Hlntu"]).unwrap_or_default();
    let listening = listening
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let proto = match *f.first()? {
                "tcp" => ListenerProto::Tcp,
                "udp" => ListenerProto::Udp,
                _ => return None,
            };
            Some((proto, f.get(4)?.rsplit(':').next()?.parse().ok()?))
        })
        .collect();
    Some(Host { links, listening })
}

/// [`missing`] against the host in `netns`, as the plan shows it.
pub fn check(next: &Artifacts, current: Option<&Artifacts>, netns: Option<&str>) -> Vec<Missing> {
    observe(netns).map(|h| missing(next, current, &h)).unwrap_or_default()
}
