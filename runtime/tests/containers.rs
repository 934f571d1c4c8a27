//! fwc next to Docker: Docker's real rule layout, loaded with iptables-nft
//! into a test namespace (the tables, chains and a published-port DNAT exactly as a Docker
//! host's `iptables-save` shows them), a bridge `docker0` with a "container" namespace behind
//! it, and clients in their own namespaces. fwc's `containers` rules decide who reaches the
//! published port, `forward policy=drop` keeps the containers' own traffic working, and
//! Docker's tables survive every apply byte for byte. Nothing is loaded into the root namespace.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use fwc_testkit::{privileged, tool, veth, Netns};

/// Docker 20.10–27 (iptables backend) with one container, 198.18.17.2 on `docker0`, started
/// as `docker run -p 8080:80`: `iptables-save` of such a host, with the container subnet moved
/// into the test range (Docker's default is 172.17.0.0/16).
const DOCKER_RULES: &str = "\
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:DOCKER - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER
-A OUTPUT ! -d 127.0.0.0/8 -m addrtype --dst-type LOCAL -j DOCKER
-A POSTROUTING -s 198.18.17.0/24 ! -o docker0 -j MASQUERADE
-A POSTROUTING -s 198.18.17.2/32 -d 198.18.17.2/32 -p tcp -m tcp --dport 80 -j MASQUERADE
-A DOCKER -i docker0 -j RETURN
-A DOCKER ! -i docker0 -p tcp -m tcp --dport 8080 -j DNAT --to-destination 198.18.17.2:80
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:DOCKER - [0:0]
:DOCKER-ISOLATION-STAGE-1 - [0:0]
:DOCKER-ISOLATION-STAGE-2 - [0:0]
:DOCKER-USER - [0:0]
-A FORWARD -j DOCKER-USER
-A FORWARD -j DOCKER-ISOLATION-STAGE-1
-A FORWARD -o docker0 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A FORWARD -o docker0 -j DOCKER
-A FORWARD -i docker0 ! -o docker0 -j ACCEPT
-A FORWARD -i docker0 -o docker0 -j ACCEPT
-A DOCKER -d 198.18.17.2/32 ! -i docker0 -o docker0 -p tcp -m tcp --dport 80 -j ACCEPT
-A DOCKER-ISOLATION-STAGE-1 -i docker0 ! -o docker0 -j DOCKER-ISOLATION-STAGE-2
-A DOCKER-ISOLATION-STAGE-1 -j RETURN
-A DOCKER-ISOLATION-STAGE-2 -o docker0 -j DROP
-A DOCKER-ISOLATION-STAGE-2 -j RETURN
-A DOCKER-USER -j RETURN
COMMIT
";

/// Only the office (198.18.1.0/24) reaches the published port; routed traffic is dropped
/// except what fwc lets through for the containers.
const RULES: &str = r#"
fwc 1
set "office" "198.18.1.0/24"
containers policy=drop {
    allow "web" proto=tcp port=8080 from="@office"
}
forward policy=drop {
    deny "no-smtp-out" proto=tcp port=25 in="docker0"
}
"#;

/// The same with the web rule renamed and a second port: an apply that changes fwc's table.
const RULES_CHANGED: &str = r#"
fwc 1
set "office" "198.18.1.0/24"
containers policy=drop {
    allow "web-office" proto=tcp port="8080,8443" from="@office"
}
forward policy=drop {
}
"#;

fn fwc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fwc")).args(args).env("NO_COLOR", "1").env_remove("FWC_TEST_FAIL").output().unwrap()
}

fn apply(host: &Netns, repo: &Path, state: &Path, kdl: &str) {
    std::fs::write(repo.join("fwc.kdl"), kdl).unwrap();
    let o = fwc(&["apply", repo.to_str().unwrap(), "--state-dir", state.to_str().unwrap(), "--netns", &host.name, "--auto-approve"]);
    assert!(o.status.success(), "fwc apply failed:\n{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
}

/// `iptables-nft-save` without its timestamp lines, and nft's own listing of Docker's two
/// tables with handles (so a reorder or a re-created rule shows too). Packet counters are
/// zeroed: stray packets of the namespaces (TCP teardown, …) move them at any time.
fn docker_tables(host: &Netns) -> String {
    let save = host.exec(&["iptables-nft-save"]);
    let save: Vec<String> = save
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| match (l.starts_with(':'), l.rfind(" [")) {
            (true, Some(i)) => format!("{} [n:n]", &l[..i]),
            _ => l.to_string(),
        })
        .collect();
    let nat = host.exec(&["nft", "-a", "list", "table", "ip", "nat"]);
    let filter = host.exec(&["nft", "-a", "list", "table", "ip", "filter"]);
    let mut words: Vec<String> = Vec::new();
    for w in format!("{nat}\n{filter}").split(' ') {
        let counted = words.last().is_some_and(|p| p == "packets" || p == "bytes");
        words.push(if counted { "n".into() } else { w.to_string() });
    }
    format!("{}\n{}", save.join("\n"), words.join(" "))
}

/// Connect to addr:port from `ns`; what the server said, or None (timeout, refused).
fn reach(ns: &Netns, addr: &str, port: u16) -> Option<String> {
    let o = ns.try_exec(&["timeout", "4", "socat", "-T2", "-", &format!("TCP4:{addr}:{port},connect-timeout=1")]);
    let said = String::from_utf8_lossy(&o.stdout).trim().to_string();
    (o.status.success() && !said.is_empty()).then_some(said)
}

/// A TCP server on `port` in `ns` that says `hello` to every connection.
fn serve(ns: &mut Netns, port: u16, hello: &str) {
    ns.spawn(&["socat", &format!("TCP4-LISTEN:{port},fork,reuseaddr"), &format!("SYSTEM:echo {hello}")]);
    let t = Instant::now();
    while ns.try_exec(&["ss", "-Hltn", &format!("sport = :{port}")]).stdout.is_empty() {
        assert!(t.elapsed() < Duration::from_secs(5), "nothing listens on {port} in {}", ns.name);
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn docker_layout_survives_applies_and_containers_rules_decide_who_reaches_the_published_port() {
    let test = "docker_layout_survives_applies_and_containers_rules_decide_who_reaches_the_published_port";
    if !privileged(test) || !tool(test, "iptables-nft-restore", "iptables") || !tool(test, "socat", "socat") {
        return;
    }
    // office client 198.18.1.2 -- host -- other client 198.18.3.2; host docker0 198.18.17.1 --
    // container 198.18.17.2 (a server on :80, published as host:8080).
    let host = Netns::new("h");
    let mut office = Netns::new("o");
    let other = Netns::new("x");
    let mut container = Netns::new("k");
    veth(&office, &["198.18.1.2/24"], &host, &["198.18.1.1/24"]);
    veth(&other, &["198.18.3.2/24"], &host, &["198.18.3.1/24"]);
    let (_, host_end) = veth(&container, &["198.18.17.2/24"], &host, &[]);
    host.exec(&["ip", "link", "add", "docker0", "type", "bridge"]);
    host.exec(&["ip", "addr", "add", "198.18.17.1/24", "dev", "docker0"]);
    host.exec(&["ip", "link", "set", &host_end, "master", "docker0"]);
    host.exec(&["ip", "link", "set", "docker0", "up"]);
    host.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    office.exec(&["ip", "route", "add", "default", "via", "198.18.1.1"]);
    other.exec(&["ip", "route", "add", "default", "via", "198.18.3.1"]);
    container.exec(&["ip", "route", "add", "default", "via", "198.18.17.1"]);
    serve(&mut container, 80, "container");
    serve(&mut office, 9000, "world");

    let mut restore = host.cmd("iptables-nft-restore");
    restore.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let mut child = restore.spawn().unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), DOCKER_RULES.as_bytes()).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "iptables-nft-restore: {}", String::from_utf8_lossy(&o.stderr));

    // Docker alone: the published port is open to everyone (moby#22054), egress works.
    assert_eq!(reach(&office, "198.18.1.1", 8080).as_deref(), Some("container"));
    assert_eq!(reach(&other, "198.18.3.1", 8080).as_deref(), Some("container"), "Docker publishes to everyone");
    assert_eq!(reach(&container, "198.18.1.2", 9000).as_deref(), Some("world"));
    let docker_before = docker_tables(&host);

    let tmp = tempfile::tempdir().unwrap();
    let (repo, state) = (tmp.path().join("repo"), tmp.path().join("state"));
    std::fs::create_dir_all(&repo).unwrap();
    // `fwc plan` sees the port Docker publishes and warns while the rules leave it open (no
    // containers block; then a block with policy accept that does not name 8080), not once
    // policy=drop closes it.
    let plan_warnings = |kdl: &str| -> Vec<String> {
        std::fs::write(repo.join("fwc.kdl"), kdl).unwrap();
        let o = fwc(&["plan", repo.to_str().unwrap(), "--state-dir", state.to_str().unwrap(), "--netns", &host.name, "--json"]);
        assert!(o.status.success(), "fwc plan failed:\n{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["published_open"].as_array().unwrap().iter().map(|w| w.as_str().unwrap().to_string()).collect()
    };
    let w = plan_warnings("fwc 1\nforward policy=drop {\n}\n");
    assert!(w.len() == 1 && w[0].starts_with("tcp/8080 is published by ip nat DOCKER and open to everyone"), "{w:?}");
    let w = plan_warnings("fwc 1\ncontainers {\n    deny \"db\" proto=tcp port=5432\n}\n");
    assert!(w.len() == 1 && w[0].contains("containers policy is accept"), "{w:?}");
    assert_eq!(plan_warnings(RULES), Vec::<String>::new());
    std::fs::write(repo.join("fwc.kdl"), "fwc 1\n").unwrap();
    let o = fwc(&["plan", repo.to_str().unwrap(), "--state-dir", state.to_str().unwrap(), "--netns", &host.name]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("Warning: published container ports open to everyone:\n  ! tcp/8080 is published by ip nat DOCKER"), "{text}");
    // Several applies, the table changing in between (a diff apply and a full one).
    apply(&host, &repo, &state, RULES);
    apply(&host, &repo, &state, RULES_CHANGED);
    apply(&host, &repo, &state, RULES);
    apply(&host, &repo, &state, RULES);
    assert_eq!(docker_tables(&host), docker_before, "an fwc apply changed Docker's tables");

    // fwc decides who reaches the published port; Docker's DNAT still does the forwarding.
    assert_eq!(reach(&office, "198.18.1.1", 8080).as_deref(), Some("container"), "the office is allowed");
    assert_eq!(reach(&other, "198.18.3.1", 8080), None, "the other client is not in the office set");
    // forward policy=drop: the container's own connections still go out (fwc's bridge
    // accept), and a `deny … in=docker0` in forward still applies.
    assert_eq!(reach(&container, "198.18.1.2", 9000).as_deref(), Some("world"), "forward policy=drop broke container egress");
    serve(&mut office, 25, "smtp");
    assert_eq!(reach(&container, "198.18.1.2", 25), None, "no-smtp-out did not stop the container");
    // The verdicts are fwc's rules (counters), not an accident of routing.
    let listing = host.exec(&["nft", "list", "chain", "inet", "fwc", "containers_rules"]);
    assert!(listing.contains("ct original proto-dst 8080") && listing.contains("comment \"fwc:filter:web\""), "{listing}");
    let hits = |comment: &str| -> u64 {
        let line = listing.lines().find(|l| l.contains(comment)).unwrap_or_else(|| panic!("no {comment} in {listing}"));
        let w: Vec<&str> = line.split_whitespace().collect();
        w[w.iter().position(|x| *x == "packets").unwrap() + 1].parse().unwrap()
    };
    assert!(hits("fwc:filter:web") >= 1, "{listing}");
    assert!(hits("fwc:chain:containers") >= 1, "{listing}");
}
