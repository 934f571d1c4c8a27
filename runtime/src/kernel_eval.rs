//! The kernel evaluator: loads compiled artifacts into a private scratch network namespace
//! (never the host's), sends real packets into it through veth pairs from a second scratch
//! namespace, and reads what the kernel did from nftables tracing (`meta nftrace` + `nft
//! monitor trace`). It answers the same questions as the pure evaluator
//! (`fwc_compiler::eval`) — verdict, deciding rule, destination after DNAT, QoS class of the
//! first packet — so the two can be
//! held equal (`fwc test --kernel`, runtime/tests/kernel_eval.rs). Both namespaces (and with
//! them every link, route and ruleset) are deleted on drop, also when a step fails.
//!
//! Scope: first packets of TCP, UDP and ICMP (echo request and reply) flows arriving from outside
//! (`input` and `forward` origins); a flow sent by the host itself (`output`) is not sent (`None`).
//!
//! Tools: the scratch namespaces, veths, addresses and routes are made with iproute2 (`ip netns
//! add` gives named namespaces under /run/netns that the `nft` processes then run in, with
//! `ip netns exec`, and that `ip netns del` removes with everything inside); nft and `nft
//! monitor trace` are processes that must run in the namespace. `fwc test --kernel` is a test
//! harness and needs nft and ip anyway; sysctls are written to /proc/sys from a thread that
//! joined the namespace, and packets are sent from such a thread.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fwc_compiler::artifacts::{Artifacts, QOS_MARK_MASK};
use fwc_compiler::eval::nft::Effect;
use fwc_compiler::eval::{Flow, Origin, RouteBack, Verdict, L4};

mod frames;
mod trace;

use frames::{frame, link_dst};
pub use trace::KernelOutcome;
use trace::{parse_trace, MARKER_MAC, TRACE_CHAIN, TRACE_TABLE};

#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("kernel mode needs root (it creates network namespaces and loads nftables rulesets into them)")]
    NotRoot,
    #[error("{step}: {detail}")]
    Step { step: String, detail: String },
}

fn step_err(step: &str, detail: impl std::fmt::Display) -> KernelError {
    KernelError::Step { step: step.to_string(), detail: detail.to_string() }
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Two scratch namespaces, deleted (with everything inside) on drop.
struct Scratch {
    host: String,
    peer: String,
    monitor: Option<std::process::Child>,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(mut m) = self.monitor.take() {
            let _ = m.kill();
            let _ = m.wait();
        }
        for ns in [&self.host, &self.peer] {
            let _ = Command::new("ip").args(["netns", "del", ns]).stderr(Stdio::null()).status();
        }
    }
}

fn run(step: &str, argv: &[&str], stdin: Option<&str>) -> Result<String, KernelError> {
    let mut c = Command::new(argv[0]);
    c.args(&argv[1..]).stdout(Stdio::piped()).stderr(Stdio::piped());
    if stdin.is_some() {
        c.stdin(Stdio::piped());
    }
    let mut child = c.spawn().map_err(|e| step_err(step, format!("cannot run {}: {e}", argv[0])))?;
    if let Some(text) = stdin {
        child.stdin.take().expect("piped").write_all(text.as_bytes()).map_err(|e| step_err(step, e))?;
    }
    let out = child.wait_with_output().map_err(|e| step_err(step, e))?;
    if !out.status.success() {
        return Err(step_err(step, format!("`{}` failed: {}", argv.join(" "), String::from_utf8_lossy(&out.stderr).trim())));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Name of the host-side interface a flow arrives on (`fwck0` when the flow names none).
const DEFAULT_IF: &str = "fwck0";

/// Flows sent as packets: not the host's own, and of ICMP only echo requests and replies and
/// destination-unreachable errors (their identifier, or the error's unused word, carries the
/// flow's source port, which names the packet in the trace). A packet of another protocol
/// (GRE, ESP, …) or of neighbour discovery carries it as its IPv4 identification or IPv6 flow label.
fn sends(f: &Flow) -> bool {
    f.origin != Origin::Output && (f.proto.has_ports() || matches!((f.proto, f.dport), (L4::Icmp, 8 | 0 | 3) | (L4::Icmpv6, 128 | 129 | 1 | 133..=136) | (L4::Other(_), _)))
}

/// Evaluate `flows` in the kernel. Flows must have distinct source ports (they identify the
/// packets in the trace). The result has one entry per flow (`None`: not sent, see module doc).
pub fn evaluate(a: &Artifacts, flows: &[Flow]) -> Result<Vec<Option<KernelOutcome>>, KernelError> {
    if unsafe { libc::geteuid() } != 0 {
        return Err(KernelError::NotRoot);
    }
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let tag = format!("fwc-k-{}-{n}", std::process::id());
    let mut s = Scratch { host: format!("{tag}h"), peer: format!("{tag}p"), monitor: None };
    run("create namespace", &["ip", "netns", "add", &s.host], None)?;
    run("create namespace", &["ip", "netns", "add", &s.peer], None)?;
    let (h, p) = (s.host.clone(), s.peer.clone());
    for ns in [&h, &p] {
        run("loopback", &["ip", "-n", ns, "link", "set", "lo", "up"], None)?;
    }
    // Interfaces: the default one plus every in=/out= name the flows use.
    let mut names: BTreeSet<String> = BTreeSet::from([DEFAULT_IF.to_string()]);
    for f in flows.iter().filter(|f| sends(f)) {
        names.extend(f.iif.iter().cloned());
        names.extend(f.oif.iter().cloned());
        if let RouteBack::Via(v) = &f.back {
            names.insert(v.clone());
        }
    }
    let mut ifaces: BTreeMap<String, (String, [u8; 6])> = BTreeMap::new();
    for (i, name) in names.iter().enumerate() {
        let peer_name = format!("p{i}");
        let mac = [0x02, 0, 0, 0, 1, i as u8];
        let mac_s = mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":");
        run("veth", &["ip", "-n", &h, "link", "add", name, "address", &mac_s, "type", "veth", "peer", "name", &peer_name, "netns", &p], None)?;
        run("veth", &["ip", "-n", &h, "link", "set", name, "up"], None)?;
        run("veth", &["ip", "-n", &p, "link", "set", &peer_name, "up"], None)?;
        // An address of its own on each interface (from ranges no flow uses), so a masquerade
        // out of it has a source to take (without one the kernel drops the packet).
        let (v4, v6) = (format!("100.64.0.{}/32", i + 1), format!("2001:db8:ffee::{:x}/128", i + 1));
        run("interface address", &["ip", "-n", &h, "addr", "add", &v4, "dev", name], None)?;
        run("interface address", &["ip", "-n", &h, "addr", "add", &v6, "dev", name, "nodad"], None)?;
        ifaces.insert(name.clone(), (peer_name, mac));
    }
    // Written to /proc/sys from a thread inside the namespace: no sysctl(8), no `ip netns exec`.
    let sysctl = |k: &str, v: &str| crate::engine::transaction::write_sysctl(Some(&h), k, v).map_err(|e| step_err("sysctl", e));
    for (k, v) in [("net.ipv4.ip_forward", "1"), ("net.ipv6.conf.all.forwarding", "1"), ("net.ipv4.conf.all.rp_filter", "0"), ("net.ipv4.conf.default.rp_filter", "0")] {
        sysctl(k, v)?;
    }
    for name in &names {
        sysctl(&format!("net.ipv4.conf.{name}.rp_filter"), "0")?;
    }
    run("route", &["ip", "-n", &h, "route", "add", "default", "dev", DEFAULT_IF], None)?;
    run("route", &["ip", "-n", &h, "-6", "route", "add", "default", "dev", DEFAULT_IF], None)?;
    let mut locals = BTreeSet::new();
    let mut routes = BTreeSet::new();
    let after = destinations_after_dnat(a, flows);
    for (f, after) in flows.iter().zip(after).filter(|(f, _)| sends(f)) {
        match f.origin {
            Origin::Input => {
                locals.insert(f.daddr);
            }
            _ => {
                if let Some(o) = &f.oif {
                    routes.insert((f.daddr, o.clone()));
                }
            }
        }
        // A DNATed flow leaves through its out= interface (the default one without).
        if after != f.daddr {
            if let Some(o) = &f.oif {
                routes.insert((after, o.clone()));
            }
        }
    }
    // Broadcast and multicast destinations are delivered without an address of their own
    // (224.0.0.1 / ff02::1: every interface has joined the all-hosts group).
    for a in locals.iter().filter(|a| !a.is_multicast() && *a != &IpAddr::from([255, 255, 255, 255])) {
        let cidr = if a.is_ipv4() { format!("{a}/32") } else { format!("{a}/128") };
        let mut argv = vec!["ip", "-n", &h, "addr", "add", &cidr, "dev", "lo"];
        if a.is_ipv6() {
            argv.push("nodad");
        }
        run("local address", &argv, None)?;
    }
    for (a, dev) in &routes {
        if locals.contains(a) {
            continue;
        }
        let cidr = if a.is_ipv4() { format!("{a}/32") } else { format!("{a}/128") };
        run("route", &["ip", "-n", &h, "route", "replace", &cidr, "dev", dev], None)?;
    }
    // The routes back to the flows' sources, where reverse-path filtering looks them up.
    if uses_fib_saddr(&a.nftables) {
        for f in flows.iter().filter(|f| sends(f)) {
            let cidr = if f.saddr.is_ipv4() { format!("{}/32", f.saddr) } else { format!("{}/128", f.saddr) };
            match source_route(f) {
                Some(Some(dev)) if dev != DEFAULT_IF => run("source route", &["ip", "-n", &h, "route", "replace", &cidr, "dev", dev], None)?,
                Some(None) => run("source route", &["ip", "-n", &h, "route", "replace", "unreachable", &cidr], None)?,
                _ => String::new(),
            };
        }
    }
    // The ruleset under test, and a separate table that turns tracing on for every packet.
    let ruleset = serde_json::to_string(&a.nftables).expect("json");
    run("load nftables.json", &["ip", "netns", "exec", &h, "nft", "-j", "-f", "-"], Some(&ruleset))?;
    run("trace table", &["ip", "netns", "exec", &h, "nft", "-f", "-"], Some(&trace_table()))?;
    let out_path = tempfile::NamedTempFile::new().map_err(|e| step_err("trace file", e))?;
    let out_file = out_path.reopen().map_err(|e| step_err("trace file", e))?;
    s.monitor = Some(
        Command::new("ip")
            .args(["netns", "exec", &h, "nft", "monitor", "trace"])
            .stdout(out_file)
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| step_err("nft monitor trace", e))?,
    );
    // Send from the peer namespace (a thread that joins it; the process stays where it is).
    let frames: Vec<(String, Vec<u8>)> = flows
        .iter()
        .filter(|f| sends(f))
        .map(|f| {
            let (peer_if, mac) = &ifaces[f.iif.as_deref().unwrap_or(DEFAULT_IF)];
            (peer_if.clone(), frame(f, PEER_MAC, link_dst(f.daddr, *mac)))
        })
        .collect();
    let (marker_if, marker_dst) = ifaces[DEFAULT_IF].clone();
    let peer_path = format!("/run/netns/{p}");
    let trace_path = out_path.path().to_path_buf();
    std::thread::spawn(move || send_frames(&peer_path, &frames, &trace_path, (&marker_if, marker_dst)))
        .join()
        .map_err(|_| step_err("send", "sender thread panicked"))??;
    // The connections the packets made (before the namespace goes): who was translated to what.
    let conntrack = run("read conntrack", &["ip", "netns", "exec", &h, "cat", "/proc/net/nf_conntrack"], None).unwrap_or_default();
    let nat_sources = nat_sources(&conntrack);
    if let Some(mut m) = s.monitor.take() {
        let _ = m.kill();
        let _ = m.wait();
    }
    let text = std::fs::read_to_string(out_path.path()).map_err(|e| step_err("read trace", e))?;
    if text.contains("lost some netlink events") {
        return Err(step_err("nft monitor trace", "the trace lost events (nft's netlink socket overflowed); nothing can be concluded from it"));
    }
    let table = fwc_compiler::eval::nft::Table::from_json(&a.nftables).map_err(|e| step_err("read nftables.json", e))?;
    let mut by_sport = parse_trace(&text, &table);
    for (sport, k) in by_sport.iter_mut() {
        k.nat_source = nat_sources.get(sport).copied();
    }
    Ok(flows.iter().map(|f| if sends(f) { by_sport.get(&f.sport).cloned() } else { None }).collect())
}

/// From `/proc/net/nf_conntrack`: source port (ICMP: identifier) of each connection whose
/// source was translated -> the new source (the reply tuple's destination).
fn nat_sources(text: &str) -> BTreeMap<u16, IpAddr> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let field = |key: &str, nth: usize| line.split_whitespace().filter_map(|w| w.strip_prefix(key)).nth(nth);
        let port = field("sport=", 0).or_else(|| field("id=", 0)).and_then(|p| p.parse::<u16>().ok());
        let (Some(port), Some(src), Some(new)) = (port, field("src=", 0), field("dst=", 1)) else { continue };
        if let (Ok(src), Ok(new)) = (src.parse::<IpAddr>(), new.parse::<IpAddr>()) {
            if src != new {
                out.insert(port, new);
            }
        }
    }
    out
}

/// Source MAC of the frames that carry flows.
const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 2, 1];


/// Marker numbers (their UDP source port): "is the trace listener there yet?" and "every
/// frame before this one has been traced".
const MARKER_READY: u16 = 1;
const MARKER_END: u16 = 2;

/// How long the kernel gets to show a marker's trace: generous, it is only reached when
/// tracing does not work at all.
const MARKER_DEADLINE: Duration = Duration::from_secs(120);

/// The table that turns tracing on for every packet. Its chain is the first of prerouting
/// (priority -500, before conntrack), so every packet's trace starts there.
fn trace_table() -> String {
    let mac = MARKER_MAC.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":");
    format!("table inet {TRACE_TABLE} {{\n chain {TRACE_CHAIN} {{ type filter hook prerouting priority -500; meta nftrace set 1; ether saddr {mac} drop; }}\n}}\n")
}


/// A marker frame (UDP, source port `n`) to `dst_mac`.
fn marker_frame(n: u16, dst_mac: [u8; 6]) -> Vec<u8> {
    let f = Flow {
        proto: L4::Udp,
        saddr: IpAddr::from([192, 0, 0, 8]),
        sport: n,
        daddr: IpAddr::from([192, 0, 0, 9]),
        dport: 9,
        origin: Origin::Input,
        iif: None,
        oif: None,
        tcp_flags: 0,
        icmp_code: 0,
        back: Default::default(),
    };
    frame(&f, MARKER_MAC, dst_mac)
}

/// Has the trace in `path` shown marker `n`?
fn marker_traced(path: &std::path::Path, n: u16) -> bool {
    let mac = MARKER_MAC.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":");
    let (mac, port) = (format!("ether saddr {mac} "), format!("udp sport {n} "));
    std::fs::read_to_string(path).is_ok_and(|t| t.lines().any(|l| l.contains(&mac) && l.contains(&port)))
}

/// Send `frames` from the peer namespace `netns`, between two markers: before the first
/// frame, a marker is sent (again every 20 ms) until `nft monitor trace` has written its trace
/// to `trace` (the listener is subscribed); after the last, one more until its trace is there.
/// The thread stays on one CPU, so the veths queue every frame on that CPU's backlog, which
/// the kernel works through in order: once the end marker is traced, so is every frame.
fn send_frames(netns: &str, frames: &[(String, Vec<u8>)], trace: &std::path::Path, marker: (&str, [u8; 6])) -> Result<(), KernelError> {
    let fd = std::fs::File::open(netns).map_err(|e| step_err("join peer namespace", e))?;
    use std::os::fd::AsRawFd;
    // SAFETY: setns and sched_setaffinity on this (dedicated, short-lived) thread only.
    if unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(step_err("join peer namespace", std::io::Error::last_os_error()));
    }
    unsafe {
        let cpu = libc::sched_getcpu();
        if cpu >= 0 {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu as usize, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(step_err("pin the sender to one CPU", std::io::Error::last_os_error()));
            }
        }
    }
    // SAFETY: plain socket calls; the fd is closed below.
    let sock = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
    if sock < 0 {
        return Err(step_err("packet socket", std::io::Error::last_os_error()));
    }
    let send = |ifname: &str, frame: &[u8]| -> Result<(), KernelError> {
        let cname = std::ffi::CString::new(ifname).expect("no NUL");
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_ifindex = ifindex as i32;
        addr.sll_halen = 6;
        addr.sll_addr[..6].copy_from_slice(&frame[..6]);
        let rc = unsafe {
            libc::sendto(sock, frame.as_ptr().cast(), frame.len(), 0, (&addr as *const libc::sockaddr_ll).cast(), std::mem::size_of::<libc::sockaddr_ll>() as u32)
        };
        if rc < 0 {
            return Err(step_err("send", std::io::Error::last_os_error()));
        }
        Ok(())
    };
    let until_traced = |n: u16| -> Result<(), KernelError> {
        let start = std::time::Instant::now();
        let frame = marker_frame(n, marker.1);
        loop {
            send(marker.0, &frame)?;
            std::thread::sleep(Duration::from_millis(20));
            if marker_traced(trace, n) {
                return Ok(());
            }
            if start.elapsed() > MARKER_DEADLINE {
                return Err(step_err("nft monitor trace", format!("no trace of a marker packet after {} s (does this kernel trace nftables?)", MARKER_DEADLINE.as_secs())));
            }
        }
    };
    let result = (|| {
        until_traced(MARKER_READY)?;
        for (ifname, frame) in frames {
            send(ifname, frame)?;
            // Pace the packets so the trace listener's socket does not overflow.
            std::thread::sleep(Duration::from_micros(200));
        }
        until_traced(MARKER_END)
    })();
    unsafe { libc::close(sock) };
    result
}

/// The part of a pure explanation the kernel can be checked against: verdict, deciding rule
/// identity, whether a policy decided, destination seen by the input/forward filter chain, QoS
/// class bits of the first packet's mark as it left, the user's source NAT rule that
/// translated it.
pub type Comparable = (Verdict, Option<String>, bool, Option<(IpAddr, u16)>, Option<u32>, Option<String>);

/// [`Comparable`] of the pure evaluator's explanation of `f`.
pub fn pure_comparable(f: &Flow, x: &fwc_compiler::eval::Explanation) -> Comparable {
    let reached_filter = !x.steps.iter().any(|s| s.hook == "prerouting" && s.verdict != Verdict::Accept);
    let mark = x
        .steps
        .iter()
        .filter(|s| s.hook == "postrouting" && s.direction == "original")
        .flat_map(|s| &s.hits)
        .flat_map(|h| &h.effects)
        .filter_map(|e| match e {
            Effect::SetMark { which: "meta mark", value } => Some(*value),
            _ => None,
        })
        .last();
    let qos_mark = mark.map(|m| m & QOS_MARK_MASK).filter(|&b| b != 0);
    let snat = x.snat.as_ref().map(|s| s.rule.clone());
    (x.verdict, x.decided_by.identity.clone(), x.decided_by.index.is_none(), reached_filter.then(|| x.dnat.unwrap_or((f.daddr, f.dport))), qos_mark, snat)
}

/// Do the pure explanation and the kernel outcome agree? A round-robin DNAT agrees with any of
/// its targets (the kernel's counter has moved on with earlier connections).
pub fn agree(f: &Flow, x: &fwc_compiler::eval::Explanation, k: &KernelOutcome) -> bool {
    if x.dnat_name.is_some() {
        // A kernel forward to a DNS name: its DNAT chain is empty until a forwarder resolves
        // the name, and no forwarder runs in the scratch namespace; nothing to compare.
        return true;
    }
    let mut pure = pure_comparable(f, x);
    let kern = kernel_comparable(k);
    if let (Some(_), Some(kd)) = (pure.3, kern.3) {
        if x.dnat_round_robin.contains(&kd) {
            pure.3 = Some(kd);
        }
    }
    pure == kern
}

/// [`Comparable`] of the kernel's outcome.
pub fn kernel_comparable(k: &KernelOutcome) -> Comparable {
    (k.verdict, k.identity.clone(), k.policy, k.seen_dst, k.qos_mark, k.snat_rule.clone())
}

/// Each flow's destination after prerouting as the pure evaluator sees it (the DNAT target, or
/// the destination itself): the scratch namespace must route it where the flow says.
fn destinations_after_dnat(a: &Artifacts, flows: &[Flow]) -> Vec<IpAddr> {
    let ev = fwc_compiler::eval::Evaluator::new(a).ok();
    flows.iter().map(|f| ev.as_ref().and_then(|ev| ev.explain(f).ok()).and_then(|x| x.dnat).map_or(f.daddr, |(addr, _)| addr)).collect()
}

/// The route back to a flow's source (`fib saddr`, reverse-path filtering): `Some(Some(dev))`
/// by that interface, `Some(None)` none (an unreachable route), `None` the flow does not say
/// and came in by the default interface (the default route leads back).
fn source_route(f: &Flow) -> Option<Option<&str>> {
    match &f.back {
        RouteBack::InIf => f.iif.as_deref().map(Some),
        RouteBack::Via(v) => Some(Some(v.as_str())),
        RouteBack::None => Some(None),
    }
}

/// Does a rule of the ruleset look a packet's source up (`fib saddr …`)?
fn uses_fib_saddr(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Object(o) => {
            o.get("fib").and_then(|f| f.get("flags")).and_then(serde_json::Value::as_array).is_some_and(|fl| fl.iter().any(|x| x == "saddr"))
                || o.values().any(uses_fib_saddr)
        }
        serde_json::Value::Array(a) => a.iter().any(uses_fib_saddr),
        _ => false,
    }
}

/// Evaluate `flows` in the kernel, in as few namespace loads as possible: flows are packed
/// into batches of distinct source ports; when no rule matches a source port, ports are
/// renumbered so that one batch holds them all.
pub fn evaluate_all(a: &Artifacts, flows: &[Flow]) -> Result<Vec<Option<KernelOutcome>>, KernelError> {
    let matches_sport = a.nftables.to_string().contains("\"sport\"");
    let mut flows: Vec<Flow> = flows.to_vec();
    if !matches_sport {
        for (i, f) in flows.iter_mut().enumerate() {
            f.sport = 20000 + i as u16;
        }
    }
    let after = destinations_after_dnat(a, &flows);
    // Where a flow's packet must be routed: (address, out interface) — a routed flow's
    // destination, or a DNATed flow's new destination (`None`: the default interface).
    let route_of = |i: usize| -> Option<(IpAddr, Option<&String>)> {
        let f = &flows[i];
        if after[i] != f.daddr {
            Some((after[i], f.oif.as_ref()))
        } else {
            (f.origin != Origin::Input).then_some((f.daddr, f.oif.as_ref()))
        }
    };
    let mut batches: Vec<Vec<usize>> = Vec::new();
    for (i, f) in flows.iter().enumerate() {
        // One batch: distinct source ports (they identify packets in the trace) and one route
        // per destination (a destination reached through two interfaces needs two loads).
        // Nor a source that another flow's destination makes a local address (the kernel
        // drops packets from its own addresses arriving from outside as martians).
        // A DNATed flow's new destination must not be another flow's local address, nor be
        // routed through another interface than its own.
        let local_of = |g: &Flow| (g.origin == Origin::Input).then_some(g.daddr);
        let routes_agree = |x: usize, y: usize| match (route_of(x), route_of(y)) {
            (Some((a, ia)), Some((b, ib))) => a != b || ia == ib,
            _ => true,
        };
        let fits = |b: &Vec<usize>| {
            b.iter().all(|&j| {
                let g = &flows[j];
                g.sport != f.sport
                    && (g.daddr != f.daddr || g.oif == f.oif || f.origin == Origin::Input)
                    && local_of(g) != Some(f.saddr)
                    && local_of(f) != Some(g.saddr)
                    && routes_agree(i, j)
                    && (after[i] == f.daddr || local_of(g) != Some(after[i]))
                    && (after[j] == g.daddr || local_of(f) != Some(after[j]))
                    // One route back per source, and none to another flow's destination.
                    && (g.saddr != f.saddr || source_route(g) == source_route(f))
                    && route_of(j).map(|r| r.0) != Some(f.saddr)
                    && route_of(i).map(|r| r.0) != Some(g.saddr)
            })
        };
        match batches.iter_mut().find(|b| fits(b)) {
            Some(b) => b.push(i),
            None => batches.push(vec![i]),
        }
    }
    let mut out = vec![None; flows.len()];
    for b in batches {
        let batch: Vec<Flow> = b.iter().map(|&i| flows[i].clone()).collect();
        for (i, r) in b.iter().copied().zip(evaluate(a, &batch)?) {
            out[i] = r;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two packets under one trace id, as `nft monitor trace` printed them in a run of golden
    /// case 29 on a busy machine: an ICMPv6 echo request (identifier 20001) the `ping6` rule
    /// accepts, then an echo reply out of the blue (identifier 20003) that conntrack finds
    /// invalid. Read as one packet, the request seemed dropped by `ct state invalid` and the
    /// reply never showed up.
    #[test]
    fn packets_that_share_a_trace_id_are_told_apart() {
        let pkt = |kind: &str, word: u32| {
            format!("iif \"fwck0\" ether saddr 02:00:00:00:02:01 ether daddr 02:00:00:00:01:02 ip6 saddr 2001:db8:ffff::1 ip6 daddr 2001:db8::1 ip6 dscp cs0 ip6 ecn not-ect ip6 hoplimit 64 ip6 flowlabel 0 ip6 nexthdr ipv6-icmp ip6 length 12 icmpv6 type {kind} icmpv6 code no-route icmpv6 parameter-problem {word} @th,64,32 0x66776321 ")
        };
        let (request, reply) = (pkt("echo-request", 20001 << 16 | 1), pkt("echo-reply", 20003 << 16 | 1));
        let text = [
            format!("trace id 2496e281 inet fwc_trace pre packet: {request}"),
            "trace id 2496e281 inet fwc_trace pre rule meta nftrace set 1 (verdict continue)".into(),
            "trace id 2496e281 inet fwc_trace pre policy accept ".into(),
            format!("trace id 2496e281 inet fwc prerouting packet: {request}"),
            "trace id 2496e281 inet fwc prerouting policy accept ".into(),
            format!("trace id 2496e281 inet fwc input packet: {request}"),
            "trace id 2496e281 inet fwc input rule icmpv6 type { echo-request, nd-router-advert, 200 } counter packets 0 bytes 0 accept comment \"fwc:filter:ping6\" (verdict accept)".into(),
            "trace id 0d1509f8 inet fwc_trace pre packet: iif \"fwck0\" ether saddr 02:00:00:00:ff:fe ether daddr 02:00:00:00:01:02 ip saddr 192.0.0.8 ip daddr 192.0.0.9 udp sport 2 udp dport 9 ".into(),
            "trace id 0d1509f8 inet fwc_trace pre rule ether saddr 02:00:00:00:ff:fe drop (verdict drop)".into(),
            format!("trace id 2496e281 inet fwc_trace pre packet: {reply}"),
            "trace id 2496e281 inet fwc_trace pre rule meta nftrace set 1 (verdict continue)".into(),
            "trace id 2496e281 inet fwc_trace pre policy accept ".into(),
            format!("trace id 2496e281 inet fwc input packet: {reply}"),
            "trace id 2496e281 inet fwc input rule ct state invalid drop (verdict drop)".into(),
        ]
        .join("\n");
        let nft = serde_json::json!({"nftables": [
            {"add": {"table": {"family": "inet", "name": "fwc"}}},
            {"add": {"chain": {"family": "inet", "table": "fwc", "name": "prerouting", "type": "nat", "hook": "prerouting", "prio": -100, "policy": "accept"}}},
            {"add": {"chain": {"family": "inet", "table": "fwc", "name": "input", "type": "filter", "hook": "input", "prio": 0, "policy": "drop"}}},
        ]});
        let table = fwc_compiler::eval::nft::Table::from_json(&nft).unwrap();
        let got = parse_trace(&text, &table);
        assert_eq!(got.keys().copied().collect::<Vec<_>>(), vec![20001, 20003], "one outcome per packet, the marker left out");
        let (request, reply) = (&got[&20001], &got[&20003]);
        assert_eq!((request.verdict, request.identity.as_deref(), request.policy), (Verdict::Accept, Some("fwc:filter:ping6"), false));
        assert_eq!(request.trace.len(), 7);
        assert_eq!((reply.verdict, reply.identity.as_deref(), reply.policy), (Verdict::Drop, None, false));
        assert_eq!(reply.trace.len(), 5);
    }
}
