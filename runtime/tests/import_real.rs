//! `fwc import` against real rulesets: each original is loaded for real in one
//! network namespace (nft -f / iptables-nft-restore), its import is applied by fwc in
//! another, and the same probe connections (TCP and UDP, IPv4 and IPv6, to the host, through
//! a port forward, routed through it) are sent to both: the outcomes (accepted, rejected,
//! dropped) must be identical in every probe. The import must also pass `fwc check`,
//! `fwc fmt --check`, `fwc test` (its generated tests/imported.kdl) and `--verify`.

use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use fwc_testkit::{privileged, Netns, Topology, output_text as text};

fn fwc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fwc")).args(args).output().expect("run fwc")
}

/// `fwc import --verify` succeeded with 0 differences, or (exit 3) found only routed flows a
/// DNAT without a destination address rewrites to a host other than this one, which fwc's
/// forwards do not (their differences are real and listed; nothing else may differ). Returns
/// whether there were such flows (then `fwc test` fails exactly on them).
fn verified_but_routed_dnat(o: &Output) -> bool {
    let t = text(o);
    if o.status.success() && t.contains(" 0 differ") {
        return false;
    }
    assert_eq!(o.status.code(), Some(3), "fwc import --verify failed:\n{t}");
    let n = fwc_testkit::routed_dnat_differences(&t).unwrap_or_else(|e| panic!("{e}\n\n{t}"));
    assert!(n > 0, "{t}");
    true
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/import").join(name)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Accepted,
    Rejected,
    Dropped,
}

/// One probe: protocol, destination, port, optional source address to bind. Port 0 with
/// `udp: false` is an ICMP / ICMPv6 echo request (a ping socket).
#[derive(Debug, Clone)]
struct Probe {
    udp: bool,
    dst: &'static str,
    port: u16,
    src: Option<&'static str>,
}

fn p(udp: bool, dst: &'static str, port: u16, src: Option<&'static str>) -> Probe {
    Probe { udp, dst, port, src }
}

/// Run `f` on a thread inside the network namespace of `ns`.
fn in_netns<T: Send + 'static>(ns: &Netns, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = ns.path();
    std::thread::spawn(move || {
        let fd = std::fs::File::open(&path).unwrap();
        assert_eq!(unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) }, 0, "setns {path}");
        f()
    })
    .join()
    .unwrap()
}

fn sockaddr(a: IpAddr, port: u16) -> (libc::sockaddr_storage, libc::socklen_t) {
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match a {
        IpAddr::V4(v4) => {
            let sin = libc::sockaddr_in { sin_family: libc::AF_INET as _, sin_port: port.to_be(), sin_addr: libc::in_addr { s_addr: u32::from(v4).to_be() }, sin_zero: [0; 8] };
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in, sin) };
            (ss, std::mem::size_of::<libc::sockaddr_in>() as _)
        }
        IpAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 { sin6_family: libc::AF_INET6 as _, sin6_port: port.to_be(), sin6_flowinfo: 0, sin6_addr: libc::in6_addr { s6_addr: v6.octets() }, sin6_scope_id: 0 };
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in6, sin6) };
            (ss, std::mem::size_of::<libc::sockaddr_in6>() as _)
        }
    }
}

/// Send one probe from inside the client namespace: a TCP handshake (answered by the kernel
/// on a listening socket, so no server speed is involved) or a UDP datagram to an echo
/// server. Accepted = handshake / answer; rejected = refused or unreachable; dropped = silence.
fn probe(pr: &Probe) -> Seen {
    let dst: IpAddr = pr.dst.parse().unwrap();
    let fam = if dst.is_ipv6() { libc::AF_INET6 } else { libc::AF_INET };
    let ping = !pr.udp && pr.port == 0;
    let ty = if pr.udp || ping { libc::SOCK_DGRAM } else { libc::SOCK_STREAM };
    let proto = match (ping, dst.is_ipv6()) {
        (true, false) => libc::IPPROTO_ICMP,
        (true, true) => libc::IPPROTO_ICMPV6,
        _ => 0,
    };
    unsafe {
        let fd = libc::socket(fam, ty | libc::SOCK_CLOEXEC, proto);
        assert!(fd >= 0);
        let fd = std::os::fd::OwnedFd::from_raw_fd(fd);
        let raw = fd.as_raw_fd();
        if let Some(src) = pr.src {
            let (sa, len) = sockaddr(src.parse().unwrap(), 0);
            assert_eq!(libc::bind(raw, &sa as *const _ as *const libc::sockaddr, len), 0, "bind {src}");
        }
        let tv = libc::timeval { tv_sec: 2, tv_usec: 0 };
        for opt in [libc::SO_SNDTIMEO, libc::SO_RCVTIMEO] {
            libc::setsockopt(raw, libc::SOL_SOCKET, opt, &tv as *const _ as *const libc::c_void, std::mem::size_of::<libc::timeval>() as _);
        }
        let (sa, len) = sockaddr(dst, pr.port);
        let rc = libc::connect(raw, &sa as *const _ as *const libc::sockaddr, len);
        let classify = |e: i32| match e {
            libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EACCES | libc::EPERM => Seen::Rejected,
            _ => Seen::Dropped,
        };
        if rc != 0 {
            return classify(*libc::__errno_location());
        }
        if !pr.udp && !ping {
            return Seen::Accepted;
        }
        // An echo request (type 8 / 128, code 0; the kernel fills in the id and checksum).
        let msg: &[u8] = if ping { if dst.is_ipv6() { &[128, 0, 0, 0, 0, 0, 0, 1] } else { &[8, 0, 0, 0, 0, 0, 0, 1] } } else { b"ping" };
        libc::send(raw, msg.as_ptr() as *const libc::c_void, msg.len(), 0);
        let mut buf = [0u8; 64];
        let n = libc::recv(raw, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0);
        if n > 0 { Seen::Accepted } else { classify(*libc::__errno_location()) }
    }
}

fn send(ns: &Netns, pr: &Probe) -> Seen {
    let pr = pr.clone();
    in_netns(ns, move || probe(&pr))
}

/// Listening sockets (TCP: the kernel completes handshakes; UDP: an echo thread) on every
/// probed port, so "accepted" is an answer, not a reset. They live until the test ends.
fn serve(ns: &Netns, tcp: &[u16], udp: &[u16]) {
    let (tcp, udp) = (tcp.to_vec(), udp.to_vec());
    let path = ns.path();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let fd = std::fs::File::open(&path).unwrap();
        assert_eq!(unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) }, 0, "setns {path}");
        let listeners: Vec<std::net::TcpListener> = tcp.iter().map(|p| std::net::TcpListener::bind(("::", *p)).unwrap()).collect();
        let sockets: Vec<std::net::UdpSocket> = udp.iter().map(|p| std::net::UdpSocket::bind(("::", *p)).unwrap()).collect();
        tx.send(()).unwrap();
        for s in sockets {
            std::thread::spawn(move || {
                let mut buf = [0u8; 64];
                while let Ok((n, peer)) = s.recv_from(&mut buf) {
                    let _ = s.send_to(&buf[..n], peer);
                }
            });
        }
        loop {
            for l in &listeners {
                l.set_nonblocking(true).unwrap();
                while l.accept().is_ok() {}
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    rx.recv_timeout(Duration::from_secs(10)).expect("servers started");
}

/// A topology whose backend routes back through the host (so routed probes can complete),
/// with three more client addresses (198.18.1.9, 198.18.1.20, 198.18.1.30), and servers on the probed ports of host and backend.
fn side(tcp: &[u16], udp: &[u16]) -> Topology {
    let t = Topology::new();
    // Ping sockets (ICMP echo probes) for root in the client namespace.
    t.client.exec(&["sysctl", "-qw", "net.ipv4.ping_group_range=0 2147483647"]);
    // Every rejection answered: the kernel's per-peer ICMP rate limit (6 in a burst) would
    // silence the host's later ICMP errors to the client, so a side that answers more probes
    // with ICMP (firewalld rejects TCP with ICMP where fwc may reset) would see "dropped".
    t.host.exec(&["sysctl", "-qw", "net.ipv4.icmp_ratelimit=0", "net.ipv6.icmp.ratelimit=0"]);
    t.backend.exec(&["ip", "route", "add", "default", "via", "198.18.2.1"]);
    t.backend.exec(&["ip", "-6", "route", "add", "default", "via", "2001:db8:2::1"]);
    for extra in ["198.18.1.9/24", "198.18.1.20/24", "198.18.1.30/24"] {
        t.client.exec(&["ip", "addr", "add", extra, "dev", &t.client_if.clone()]);
    }
    serve(&t.host, tcp, udp);
    serve(&t.backend, tcp, udp);
    t
}

/// Import `original` (loaded into the first side by `load`), check the result, apply it to
/// the second side, and compare every probe on both.
fn same_outcomes(from: &str, original: &Path, load: impl Fn(&Netns), probes: &[Probe], tcp: &[u16], udp: &[u16]) {
    same_outcomes_with(from, original, load, probes, tcp, udp, &[])
}

fn same_outcomes_with(from: &str, original: &Path, load: impl Fn(&Netns), probes: &[Probe], tcp: &[u16], udp: &[u16], extra: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("imported");
    let mut args = vec!["import", "--from", from, original.to_str().unwrap(), "--out", repo.to_str().unwrap(), "--verify"];
    args.extend(extra);
    let o = fwc(&args);
    let routed = verified_but_routed_dnat(&o);
    for args in [vec!["check"], vec!["fmt", "--check"], vec!["test"]] {
        if routed && args == ["test"] {
            continue;
        }
        let mut a = args.clone();
        a.push(repo.to_str().unwrap());
        let o = fwc(&a);
        assert!(o.status.success(), "fwc {args:?} on the import failed:\n{}", text(&o));
    }
    let orig = side(tcp, udp);
    load(&orig.host);
    let mine = side(tcp, udp);
    let state = tmp.path().join("state");
    let o = fwc(&["apply", repo.to_str().unwrap(), "--state-dir", state.to_str().unwrap(), "--netns", &mine.host.name, "--auto-approve"]);
    assert!(o.status.success(), "fwc apply of the import failed:\n{}", text(&o));
    let mut report = Vec::new();
    let mut differ = 0;
    for pr in probes {
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| send(&orig.client, pr));
            let b = s.spawn(|| send(&mine.client, pr));
            (a.join().unwrap(), b.join().unwrap())
        });
        if a != b {
            differ += 1;
        }
        report.push(format!("{pr:?}: original {a:?}, imported {b:?}"));
    }
    let kinds: std::collections::BTreeSet<String> = report.iter().map(|l| l.rsplit("imported ").next().unwrap().to_string()).collect();
    assert_eq!(differ, 0, "probes differ:\n{}", report.join("\n"));
    // The probes must exercise more than one outcome, or they prove little.
    assert!(kinds.len() >= 2, "all probes had the same outcome:\n{}", report.join("\n"));
    eprintln!("{}", report.join("\n"));
}

#[test]
fn nftables_conf_server_with_sets_and_a_port_forward() {
    if !privileged("nftables_conf_server_with_sets_and_a_port_forward") {
        return;
    }
    let conf = fixture("nftables.conf");
    let probes = [
        p(false, "198.18.1.1", 22, None),
        p(false, "198.18.1.1", 22, Some("198.18.1.9")), // in the blocklist
        p(false, "2001:db8:1::1", 22, None),             // not an admin over IPv6
        p(false, "198.18.1.1", 80, None),
        p(false, "2001:db8:1::1", 443, None),
        p(false, "198.18.1.1", 80, Some("198.18.1.9")),
        p(false, "198.18.1.1", 113, None),
        p(false, "198.18.1.1", 3306, None),
        p(false, "2001:db8:1::1", 8000, None),
        p(false, "198.18.1.1", 8000, None),
        p(false, "198.18.1.1", 8080, None), // the port forward to the backend
        p(false, "198.18.1.1", 5000, None),
        p(false, "198.18.2.2", 80, None), // routed, not forwarded: policy drop
        p(true, "198.18.1.1", 53, None),
        p(true, "2001:db8:1::1", 53, None),
        p(true, "198.18.1.1", 161, None),
        p(false, "198.18.1.1", 0, None),    // ping: icmp-type echo-request
        p(false, "2001:db8:1::1", 0, None), // ping6: icmpv6 echo-request
    ];
    let load = |ns: &Netns| {
        ns.exec(&["nft", "-f", conf.to_str().unwrap()]);
    };
    same_outcomes("nft", &conf, load, &probes, &[22, 80, 443, 113, 3306, 8000, 5000], &[53, 161]);
    docs_show_the_real_import(&conf);
}

/// docs/import.md shows the files this import writes: each ```kdl block headed `// <file>` is
/// that file (fwc.kdl below its three header comment lines), so the page cannot drift.
fn docs_show_the_real_import(conf: &Path) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fw");
    let o = fwc(&["import", "--from", "nft", conf.to_str().unwrap(), "--out", out.to_str().unwrap(), "-q"]);
    assert!(o.status.success(), "{}", text(&o));
    docs_show(&out, "");
}

/// The ```kdl blocks of docs/import.md headed `// {source}<file>` (`source`: "" for the nft
/// example, "firewalld: " for firewalld's) are the files of the import in `out`.
fn docs_show(out: &Path, source: &str) {
    let page = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/import.md")).unwrap();
    let mut shown = 0;
    for block in page.split("```kdl\n").skip(1) {
        let block = block.split("```").next().unwrap();
        let Some((head, body)) = block.split_once('\n') else { continue };
        let Some(file) = head.strip_prefix("// ").and_then(|f| f.strip_prefix(source)).filter(|f| f.ends_with(".kdl") && !f.contains(": ")) else { continue };
        let mut real = std::fs::read_to_string(out.join(file)).unwrap_or_else(|e| panic!("docs/import.md shows {file}, which the import does not write: {e}"));
        if file == "fwc.kdl" {
            real = real.splitn(4, '\n').nth(3).unwrap().to_string();
        }
        assert_eq!(body, real, "docs/import.md's {file} differs from what the import writes");
        shown += 1;
    }
    assert!(shown >= 2, "docs/import.md shows no imported file");
}

#[test]
fn iptables_save_of_a_docker_host_with_docker_user_rules() {
    if !privileged("iptables_save_of_a_docker_host_with_docker_user_rules") || !fwc_testkit::tool("iptables_save_of_a_docker_host_with_docker_user_rules", "iptables-nft-restore", "iptables") {
        return;
    }
    let rules = fixture("docker-host.rules");
    let probes = [
        p(false, "198.18.1.1", 22, None),
        p(false, "198.18.1.1", 80, None),
        p(false, "198.18.1.1", 443, Some("198.18.1.20")), // outside 198.18.1.0/28
        p(false, "198.18.1.1", 443, Some("198.18.1.9")),
        p(false, "198.18.1.1", 25, None),
        p(false, "198.18.1.1", 5000, None),
        p(false, "2001:db8:1::1", 5000, None), // no ip6tables rules: IPv6 is open
        p(true, "198.18.1.1", 161, None),
        p(true, "198.18.1.1", 53, None),
        p(false, "198.18.2.2", 5432, None), // DOCKER-USER drops it (and FORWARD's policy)
        p(false, "2001:db8:2::2", 5432, None),
        p(false, "2001:db8:2::2", 80, None),
        p(false, "198.18.1.1", 0, None), // ping: --icmp-type 8
        p(false, "198.18.2.2", 0, None), // routed ping: FORWARD policy drop
    ];
    let load = |ns: &Netns| {
        ns.exec(&["sh", "-c", &format!("iptables-nft-restore < {}", rules.display())]);
    };
    same_outcomes("iptables", &rules, load, &probes, &[22, 80, 443, 25, 5000, 5432], &[53, 161]);
}

/// ufw's loader and its before/after rules from the installed package (`FWC_UFW_INIT` names
/// another ufw-init, e.g. from an unpacked .deb: its package tree is used for the templates).
fn ufw_package() -> Option<(PathBuf, PathBuf)> {
    let init = std::env::var_os("FWC_UFW_INIT").map(PathBuf::from).or_else(|| ["/usr/lib/ufw/ufw-init", "/lib/ufw/ufw-init"].into_iter().map(PathBuf::from).find(|p| p.exists()))?;
    let root = init.parent()?.parent()?.parent()?;
    let share = [root.join("usr/share/ufw/iptables"), PathBuf::from("/usr/share/ufw/iptables")].into_iter().find(|p| p.join("before.rules").exists())?;
    Some((init, share))
}

#[test]
fn ufw_with_limit_rules_and_ipv6() {
    let name = "ufw_with_limit_rules_and_ipv6";
    if !privileged(name) {
        return;
    }
    let Some((init, share)) = ufw_package() else {
        assert!(std::env::var_os("FWC_REQUIRE_PRIVILEGED").is_none(), "{name}: ufw is required in CI (scripts/setup.sh installs the Debian package ufw)");
        eprintln!("SKIP {name}: ufw not installed (Debian package ufw)");
        return;
    };
    // A ufw root: /etc/ufw (the package's before/after rules, this host's user rules, made
    // with `ufw limit 22/tcp`, `ufw allow 80,443/tcp`, `ufw allow from … to any port 5432`,
    // `ufw reject 113/tcp`, `ufw allow 53/udp`), /etc/default/ufw, ufw's init functions.
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let etc = root.join("etc/ufw");
    for d in [&etc, &root.join("etc/default"), &root.join("lib/ufw")] {
        std::fs::create_dir_all(d).unwrap();
    }
    for f in ["before.rules", "after.rules", "before6.rules", "after6.rules"] {
        std::fs::copy(share.join(f), etc.join(f)).unwrap();
    }
    for f in ["user.rules", "user6.rules", "ufw.conf"] {
        std::fs::copy(fixture("ufw").join(f), etc.join(f)).unwrap();
    }
    std::fs::copy(fixture("ufw/default"), root.join("etc/default/ufw")).unwrap();
    std::fs::copy(init.with_file_name("ufw-init-functions"), root.join("lib/ufw/ufw-init-functions")).unwrap();
    let probes = [
        p(false, "198.18.1.1", 22, None), // `limit`: the first connection is within it
        p(false, "198.18.1.1", 80, None),
        p(false, "198.18.1.1", 5432, None),
        p(false, "198.18.1.1", 5432, Some("198.18.1.20")), // outside 198.18.1.0/28
        p(false, "198.18.1.1", 113, None),
        p(false, "198.18.1.1", 5000, None),
        p(true, "198.18.1.1", 53, None),
        p(true, "198.18.1.1", 137, None),
        p(false, "2001:db8:1::1", 22, None),
        p(false, "2001:db8:1::1", 5432, None),
        p(false, "2001:db8:1::1", 113, None),
        p(false, "2001:db8:1::1", 5000, None),
        p(false, "198.18.2.2", 80, None), // routed: ufw's forward policy drops it
        p(false, "198.18.1.1", 0, None),  // ping (ufw's before.rules accept echo-request)
        p(false, "2001:db8:1::1", 0, None),
    ];
    let load = |ns: &Netns| {
        ns.exec(&[init.to_str().unwrap(), "--rootdir", root.to_str().unwrap(), "--datadir", root.to_str().unwrap(), "start"]);
    };
    // Stock ufw imports whole (its `echo-reply` accept before the invalid drop included).
    same_outcomes_with("ufw", &etc, load, &probes, &[22, 80, 443, 113, 5000, 5432], &[53, 137], &[]);
}

#[test]
fn what_fwc_cannot_say_is_refused_by_line_unless_partial() {
    if !privileged("what_fwc_cannot_say_is_refused_by_line_unless_partial") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let conf = tmp.path().join("nftables.conf");
    std::fs::write(
        &conf,
        "table inet filter {\n\tchain input {\n\t\ttype filter hook input priority filter; policy drop;\n\t\ttcp dport 22 accept\n\t\tmeta mark 0x1 accept\n\t}\n}\n",
    )
    .unwrap();
    let out = tmp.path().join("fw");
    let o = fwc(&["import", "--from", "nft", conf.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("nftables.conf:5: the match on meta mark"), "{}", text(&o));
    assert!(!out.join("fwc.kdl").exists(), "nothing is written on a refusal");
    let o = fwc(&["import", "--from", "nft", conf.to_str().unwrap(), "--out", out.to_str().unwrap(), "--partial", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let schema: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas/output/import.schema.json")).unwrap()).unwrap();
    let url = schema["$id"].as_str().unwrap().to_string();
    let (mut schemas, mut compiler) = (boon::Schemas::new(), boon::Compiler::new());
    compiler.add_resource(&url, schema).unwrap();
    let index = compiler.compile(&url, &mut schemas).unwrap();
    if let Err(e) = schemas.validate(&v, index) {
        panic!("fwc import --json does not match schemas/output/import.schema.json:\n{e:#}\n{v:#}");
    }
    assert_eq!((v["format_version"].as_u64(), v["imported"].as_u64(), v["refused"][0]["origin"].as_str()), (Some(1), Some(1), Some("nftables.conf:5")), "{v}");
    assert!(v["flows"].as_u64().unwrap() > 10);
    // Never over an existing repository.
    let o = fwc(&["import", "--from", "nft", conf.to_str().unwrap(), "--out", out.to_str().unwrap(), "--partial"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("never overwrites"), "{}", text(&o));
}

#[test]
fn live_import_of_a_namespace_names_chains_and_handles() {
    if !privileged("live_import_of_a_namespace_names_chains_and_handles") {
        return;
    }
    let ns = Netns::new("li");
    ns.exec(&["nft", "-f", fixture("nftables.conf").to_str().unwrap()]);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fw");
    let o = fwc(&["import", "--from", "nft", "--live", "--netns", &ns.name, "--out", out.to_str().unwrap(), "--verify"]);
    verified_but_routed_dnat(&o);
    let input = std::fs::read_to_string(out.join("rules/10-input.kdl")).unwrap();
    assert!(input.contains(r#"allow "from-admins-ssh" proto=tcp port=22 from="@admins" comment="inet filter input handle "#), "{input}");
}

/// Root, and firewalld and dbus-daemon installed (scripts/setup.sh installs them; CI requires them).
fn firewalld_gate(name: &str) -> bool {
    privileged(name) && fwc_testkit::tool(name, "firewalld", "firewalld") && fwc_testkit::tool(name, "dbus-daemon", "dbus")
}

/// A firewalld public zone (services ssh/http/https from the system's definitions, an own
/// service, ports, rich rules: source + service accept, log + limit, tcp-reset and plain
/// reject, an ipset drop, an IPv6 rate-limited accept; an icmp-block, masquerade and a
/// forward-port) loaded by the real firewalld (private D-Bus, its own mount namespace) in one
/// namespace, the import applied by fwc in another: the same probes, the same outcomes.
#[test]
fn firewalld_public_zone_with_services_rich_rules_and_a_forward_port() {
    let name = "firewalld_public_zone_with_services_rich_rules_and_a_forward_port";
    if !firewalld_gate(name) {
        return;
    }
    let conf = fixture("firewalld");
    let probes = [
        p(false, "198.18.1.1", 22, None),
        p(false, "2001:db8:1::1", 22, None),
        p(false, "198.18.1.1", 80, None),
        p(false, "2001:db8:1::1", 443, None),
        p(false, "198.18.1.1", 7000, None), // myapp (services/myapp.xml)
        p(true, "198.18.1.1", 7001, None),
        p(true, "198.18.1.1", 7000, None), // myapp's tcp port over udp: rejected
        p(false, "198.18.1.1", 8005, None),
        p(false, "198.18.1.1", 8010, None),
        p(true, "198.18.1.1", 5353, None),
        p(false, "198.18.1.1", 3306, Some("198.18.1.9")), // rich rule: source + service mysql
        p(false, "198.18.1.1", 3306, None),
        p(false, "198.18.1.1", 2222, Some("198.18.1.20")), // log + limit, accept
        p(false, "198.18.1.1", 2222, None),
        p(false, "198.18.1.1", 22, Some("198.18.1.30")), // in ipsets/blocklist.xml: dropped
        p(true, "198.18.1.1", 5353, Some("198.18.1.30")),
        p(false, "198.18.1.1", 23, None),  // reject type tcp-reset
        p(false, "198.18.1.1", 113, None), // reject
        p(false, "2001:db8:1::1", 9000, None), // IPv6 rich rule with a limit
        p(false, "198.18.1.1", 9000, None),
        p(false, "198.18.1.1", 8080, None), // forward-port to the backend
        p(false, "198.18.2.2", 80, None),   // routed: the zone's forward target rejects it
        p(false, "198.18.1.1", 0, None),    // ping: icmp-block echo-request
        p(false, "2001:db8:1::1", 0, None),
    ];
    let daemon = std::cell::RefCell::new(None);
    let load = |ns: &Netns| {
        let lib = Path::new(fwc_runtime::import::firewalld_source::DEFAULT_LIB);
        let d = fwc_runtime::import::firewalld_source::Daemon::start(&conf, lib, Some(&ns.name)).unwrap_or_else(|e| panic!("firewalld in {}: {e}", ns.name));
        *daemon.borrow_mut() = Some(d);
    };
    same_outcomes("firewalld", &conf, load, &probes, &[22, 80, 443, 7000, 8005, 8010, 3306, 2222, 23, 113, 9000], &[7000, 7001, 5353]);
    drop(daemon.take());
    // docs/import.md shows this import (with the system's definitions, /usr/lib/firewalld).
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fw");
    let o = fwc(&["import", "--from", "firewalld", conf.to_str().unwrap(), "--out", out.to_str().unwrap(), "--skip-proof", "-q"]);
    assert!(o.status.success(), "{}", text(&o));
    docs_show(&out, "firewalld: ");
}

/// Without firewalld there is no proof: the import says so and how to install it (exit 1,
/// nothing written), unless the operator asks for --skip-proof (no tests/imported.kdl, a
/// warning); --verify cannot be skipped. Needs no root (firewalld is never started).
#[test]
fn firewalld_import_without_firewalld_needs_skip_proof() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fw");
    let run = |extra: &[&str]| {
        let mut args = vec!["import", "--from", "firewalld", fixture("firewalld").to_str().unwrap().to_string().leak(), "--firewalld-lib", fixture("firewalld-lib").to_str().unwrap().to_string().leak(), "--out", out.to_str().unwrap().to_string().leak()];
        args.extend_from_slice(extra);
        Command::new(env!("CARGO_BIN_EXE_fwc")).args(&args).env("FWC_FIREWALLD", "/nonexistent/firewalld").output().unwrap()
    };
    let o = run(&["--verify"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("the proof needs firewalld, which is not installed") && text(&o).contains("policy-rc.d") && text(&o).contains("--skip-proof"), "{}", text(&o));
    assert!(!out.exists(), "nothing is written without the proof");
    let o = run(&["--verify", "--skip-proof"]);
    assert_eq!(o.status.code(), Some(2), "--verify and --skip-proof conflict: {}", text(&o));
    let o = run(&["--skip-proof"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("warning: no tests/imported.kdl: --skip-proof"), "{}", text(&o));
    assert!(out.join("rules/10-input-public.kdl").exists() && !out.join("tests/imported.kdl").exists());
    let o = fwc(&["check", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
}

/// firewalld does not stop on a configuration it cannot load: it runs its stock one instead.
/// The import must notice (a proof against the stock configuration would prove nothing).
#[test]
fn firewalld_refusing_the_configuration_stops_the_import() {
    let name = "firewalld_refusing_the_configuration_stops_the_import";
    if !firewalld_gate(name) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let conf = tmp.path().join("firewalld");
    std::fs::create_dir_all(conf.join("zones")).unwrap();
    std::fs::write(conf.join("firewalld.conf"), "DefaultZone=public\n").unwrap();
    // A zone's target is default, ACCEPT, DROP or %%REJECT%%: "REJECT" is invalid.
    std::fs::write(conf.join("zones/public.xml"), "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<zone target=\"REJECT\">\n  <service name=\"ssh\"/>\n</zone>\n").unwrap();
    let out = tmp.path().join("fw");
    // fwc reads the XML first: its refusal names the line, before firewalld is started.
    let o = fwc(&["import", "--from", "firewalld", conf.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("zones/public.xml:2: zone target `REJECT`"), "{}", text(&o));
    assert!(!out.exists());
    // With --partial firewalld itself runs, refuses, and the import stops with its reason and
    // what fwc's reading refused.
    let o = fwc(&["import", "--from", "firewalld", conf.to_str().unwrap(), "--out", out.to_str().unwrap(), "--partial"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let t = text(&o).replace("\n  │ ", " ");
    assert!(t.contains("firewalld refused the configuration") && t.contains("fwc's reading of the XML refused: zones/public.xml:2: zone target `REJECT`"), "{t}");
    assert!(!out.exists());
}

/// Several zones the way firewalld dispatches them (sources, then interfaces, then the
/// default zone), targets ACCEPT/DROP/%%REJECT%%/default, rich rules with priorities, an
/// ipset as a zone's source, forwarding inside a zone, a policy from HOST: the proof against
/// the ruleset the real firewalld builds from it finds no difference.
#[test]
fn firewalld_zones_targets_priorities_and_policies_verify() {
    let name = "firewalld_zones_targets_priorities_and_policies_verify";
    if !firewalld_gate(name) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // Also rich rule forms, service includes with their own destinations, a conntrack helper
    // (its objects left out of the proof), policies HOST -> ANY, ANY -> HOST, ANY -> ANY.
    let out = tmp.path().join("rich");
    let o = fwc(&["import", "--from", "firewalld", fixture("firewalld-rich").to_str().unwrap(), "--out", out.to_str().unwrap(), "--verify"]);
    verified_but_routed_dnat(&o);
    let out = tmp.path().join("fw");
    let o = fwc(&["import", "--from", "firewalld", fixture("firewalld-zones").to_str().unwrap(), "--out", out.to_str().unwrap(), "--verify"]);
    verified_but_routed_dnat(&o);
    let dmz = std::fs::read_to_string(out.join("rules/30-input-dmz-fwc-t-dmz.kdl")).unwrap();
    // Priority -10 before the ICMP block, priority 5 after the services, the target last.
    let at = |s: &str| dmz.find(s).unwrap_or_else(|| panic!("{s} in\n{dmz}"));
    assert!(at("dmz-deny-from-198.18.7.0-24") < at("dmz-block-echo-request") && at("dmz-http") < at("dmz-from-198.18.8.0-24-udp-9999") && at("dmz-from-198.18.8.0-24-udp-9999") < at("dmz-in-fwc-t-dmz-drop"), "{dmz}");
    // icmp-block-inversion: the listed types pass, other ICMP meets the zone's reject.
    let lab = std::fs::read_to_string(out.join("rules/50-input-lab-fwc-t-lab.kdl")).unwrap();
    assert!(lab.contains(r#"allow "lab-echo-request" proto=icmp icmp-type="echo-request" in="fwc-t-lab""#) && !lab.contains("lab-icmp"), "{lab}");
    let output = std::fs::read_to_string(out.join("rules/80-output.kdl")).unwrap();
    assert!(output.contains(r#"reject "reject-to-198.18.66.0-24" to="198.18.66.0/24" reject-with="port-unreachable" comment="policies/out.xml:5""#), "{output}");
    for args in [vec!["fmt", "--check"], vec!["test"]] {
        let mut a = args.clone();
        a.push(out.to_str().unwrap());
        let o = fwc(&a);
        assert!(o.status.success(), "fwc {args:?}: {}", text(&o));
    }
}

/// `--live` reads the running firewalld's /etc/firewalld (here: the package's own), and says
/// that changes made without --permanent are not in it.
#[test]
fn firewalld_live_reads_etc_firewalld_and_warns_about_runtime_changes() {
    let name = "firewalld_live_reads_etc_firewalld_and_warns_about_runtime_changes";
    if !firewalld_gate(name) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fw");
    let o = fwc(&["import", "--from", "firewalld", "--live", "--out", out.to_str().unwrap(), "--skip-proof"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("warning: --live imports firewalld's permanent configuration") && text(&o).contains("firewall-cmd --runtime-to-permanent"), "{}", text(&o));
    let o = fwc(&["import", "--from", "firewalld", "--live", "--netns", "x", "--out", tmp.path().join("other").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("--netns is for --from nft/iptables"), "{}", text(&o));
}

/// The shared import cases that import whole (tests/import/cases: an ICMP accept after the
/// invalid drop; tcp flags, negations and packet types; a router's rpfilter and MSS clamps;
/// early drops before routing),
/// proven with traffic: the original
/// loaded by nft in one namespace, the import applied by fwc in another, the same probes.
#[test]
fn import_cases_that_import_whole_decide_traffic_as_the_original() {
    if !privileged("import_cases_that_import_whole_decide_traffic_as_the_original") {
        return;
    }
    // IPv4 only: neither original accepts neighbour discovery, so their IPv6 is cut off at
    // the link, while fwc accepts neighbour discovery itself (a known difference fwc cannot
    // express: docs/import.md, "the proof").
    let probes = [p(false, "198.18.1.1", 22, None), p(false, "198.18.1.1", 80, None), p(true, "198.18.1.1", 53, None), p(false, "198.18.1.1", 0, None)];
    // (sharedbase.nft is proven by the evaluator only: its output chain accepts no replies,
    // so the original never completes a connection at all, while fwc accepts established
    // packets in every chain first: a difference of later packets, which the proof — first
    // packets — does not see.)
    let conf = fixture("cases").join("icmpinv.nft");
    let load = |ns: &Netns| {
        ns.exec(&["nft", "-f", conf.to_str().unwrap()]);
    };
    same_outcomes("nft", &conf, load, &probes, &[22, 80], &[53]);
    // tcp flags, negated addresses, ports and interface sets (nft `!=`), packet types: the
    // SYN of a connection meets `tcp flags syn / …`, `ip saddr != 10.0.0.0/8` and
    // `iifname != { "eth0", "eth1" }` accept, `tcp dport != { 22, 80, 443 }` drops 8080.
    let conf = fixture("cases").join("forms.nft");
    let load = |ns: &Netns| {
        ns.exec(&["nft", "-f", conf.to_str().unwrap()]);
    };
    let probes = [p(false, "198.18.1.1", 22, None), p(false, "198.18.1.1", 80, None), p(false, "198.18.1.1", 443, None), p(false, "198.18.1.1", 8080, None), p(true, "198.18.1.1", 53, None)];
    same_outcomes("nft", &conf, load, &probes, &[22, 80, 443, 8080], &[53]);
    // A router's reverse-path filters (strict on wan0, loose everywhere) and MSS clamps: the
    // probes' sources are routed back the way they came, so both let them through alike.
    let conf = fixture("cases").join("router.nft");
    let load = |ns: &Netns| {
        ns.exec(&["nft", "-f", conf.to_str().unwrap()]);
    };
    let probes = [p(false, "198.18.1.1", 22, None), p(false, "198.18.1.1", 80, None), p(true, "198.18.1.1", 53, None)];
    same_outcomes("nft", &conf, load, &probes, &[22, 80], &[53]);
    // Early drops on the prerouting hook (at raw and at filter priority) become the
    // `prerouting` block: the two dropped clients stay dropped, the others pass.
    let early = [p(false, "198.18.1.1", 22, None), p(false, "198.18.1.1", 22, Some("198.18.1.20")), p(false, "198.18.1.1", 22, Some("198.18.1.30")), p(true, "198.18.1.1", 53, Some("198.18.1.20")), p(true, "198.18.1.1", 53, Some("198.18.1.9"))];
    let conf = fixture("cases").join("earlydrop.nft");
    let load = |ns: &Netns| {
        ns.exec(&["nft", "-f", conf.to_str().unwrap()]);
    };
    same_outcomes("nft", &conf, load, &early, &[22], &[53]);
    // The same in iptables' words (`--syn`, `! -s`, `! --dport`, `-m pkttype`; raw and
    // mangle PREROUTING drops).
    if fwc_testkit::tool("import_cases_that_import_whole_decide_traffic_as_the_original", "iptables-nft-restore", "iptables") {
        let rules = fixture("cases").join("earlydrop.v4");
        let load = |ns: &Netns| {
            ns.exec(&["sh", "-c", &format!("iptables-nft-restore < {}", rules.display())]);
        };
        same_outcomes("iptables", &rules, load, &early, &[22], &[53]);
        let rules = fixture("cases").join("tcpflags.v4");
        let load = |ns: &Netns| {
            ns.exec(&["sh", "-c", &format!("iptables-nft-restore < {}", rules.display())]);
        };
        let probes = [p(false, "198.18.1.1", 22, None), p(false, "198.18.1.1", 8080, None), p(false, "198.18.1.1", 80, None), p(true, "198.18.1.1", 53, None)];
        same_outcomes("iptables", &rules, load, &probes, &[22, 80, 8080], &[53]);
    }
}
