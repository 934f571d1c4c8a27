//! nftables.json emitter: structure tests on hand-built plans, and privileged tests that load
//! the output into a throwaway network namespace (`nft -j -c`, then `nft -j -f` and list back)
//! and send real traffic through a DNAT map forward.

use std::net::IpAddr;

use fwc_compiler::emit::nft::{self, chains, maps};
use fwc_compiler::model::*;
use fwc_compiler::place::select::{implicit_host, plan_host};
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------------
// Model constructors

fn sp<T>(v: T) -> Spanned<T> {
    Spanned::new(v, Span::default())
}

fn elem(s: &str) -> AddrElem {
    match s.split_once('-') {
        Some((a, b)) if !s.contains('/') => AddrElem::Range(a.parse().unwrap(), b.parse().unwrap()),
        _ if s.contains('/') => AddrElem::Net(s.parse().unwrap()),
        _ => AddrElem::Net(ipnet::IpNet::from(s.parse::<IpAddr>().unwrap())),
    }
}

fn addrs(s: &str) -> Option<Spanned<AddrMatch>> {
    Some(sp(match s.strip_prefix('@') {
        Some(name) => AddrMatch::Set(name.into()),
        None => AddrMatch::Literal(s.split(',').map(elem).collect()),
    }))
}

fn ports(s: &str) -> Vec<PortRange> {
    s.split(',')
        .map(|p| match p.split_once('-') {
            Some((a, b)) => PortRange { lo: a.parse().unwrap(), hi: b.parse().unwrap() },
            None => PortRange::single(p.parse().unwrap()),
        })
        .collect()
}

fn addr_set(name: &str, elems: &[&str]) -> AddrSet {
    AddrSet { name: sp(name.into()), elements: elems.iter().map(|e| sp(elem(e))).collect(), files: vec![], dynamic: None, span: Span::default(), from_file: None }
}

fn rule(chain: ChainKind, action: Action, name: &str) -> FilterRule {
    FilterRule {
        name: sp(name.into()),
        chain,
        action,
        proto: None,
        ports: None,
        sports: None,
        from: None,
        to: None,
        iif: None,
        oif: None,
        log: false,
        rate: None,
        negate: Default::default(),
        on: None,
        comment: None,
        span: Span::default(),
        more: Default::default(),
    }
}

fn chain(kind: ChainKind, policy: Policy, rules: Vec<FilterRule>) -> Chain {
    Chain { kind, policy: Some(sp(policy)), bridges: None, reject_with: None, router_advertisements: None, rules, span: Span::default() }
}

/// `listen` like ":8080", "203.0.113.1:80", "[2001:db8::1]:80-90"; `to` like
/// "10.0.0.5:80,10.0.0.6", "[2001:db8::5]:80".
fn fwd(name: &str, proto: ForwardProto, listen: &str, to: &str) -> ForwardRule {
    let (host, port) = listen.rsplit_once(':').unwrap();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let listen = Listen { addr: (!host.is_empty()).then(|| host.parse().unwrap()), ports: ports(port)[0] };
    let targets = to
        .split(',')
        .map(|t| {
            let (h, p) = if let Some(rest) = t.strip_prefix('[') {
                let (h, p) = rest.split_once(']').unwrap();
                (h.to_string(), p.strip_prefix(':').map(|p| ports(p)[0]))
            } else if let Some((h, p)) = t.split_once(':') {
                (h.to_string(), Some(ports(p)[0]))
            } else {
                (t.to_string(), None)
            };
            let host = match h.parse::<IpAddr>() {
                Ok(ip) => TargetHost::Ip(ip),
                Err(_) => TargetHost::Dns(h),
            };
            Target { host, ports: p }
        })
        .collect();
    ForwardRule {
        iif: None,
        any_destination: false,
        name: sp(name.into()),
        proto,
        listen: sp(listen),
        targets: sp(targets),
        from: None,
        up: None,
        down: None,
        backend: sp(BackendChoice::Auto),
        on: None,
        comment: None,
        span: Span::default(),
        more: Default::default(),
    }
}

fn shape(name: &str, rate: u64) -> ShapeRule {
    ShapeRule {
        name: sp(name.into()),
        from: None,
        to: None,
        proto: None,
        ports: None,
        devs: vec![sp("eth1".into())],
        rate: sp(Bandwidth(rate)),
        burst: None,
        direction: Direction::Egress,
        on: None,
        comment: None,
        span: Span::default(),
        quota: None,
    }
}

fn rate(count: u32, per: TimeUnit, burst: Option<u32>) -> Option<Spanned<EventRate>> {
    Some(sp(EventRate { count, per, burst }))
}

fn emit(rs: &Ruleset) -> Value {
    let host = implicit_host();
    let plan = plan_host(rs, &host);
    nft::emit(&plan).into_value()
}

// ---------------------------------------------------------------------------------------------
// Reading the output

fn cmds(doc: &Value) -> &Vec<Value> {
    doc["nftables"].as_array().expect("nftables array")
}

fn objects<'a>(doc: &'a Value, kind: &str) -> Vec<&'a Value> {
    cmds(doc).iter().filter_map(|c| c["add"].get(kind)).collect()
}

fn chain_rules<'a>(doc: &'a Value, chain: &str) -> Vec<&'a Value> {
    objects(doc, "rule").into_iter().filter(|r| r["chain"] == chain).collect()
}

fn rules_with_comment<'a>(doc: &'a Value, comment: &str) -> Vec<&'a Value> {
    objects(doc, "rule").into_iter().filter(|r| r["comment"] == comment).collect()
}

fn named<'a>(doc: &'a Value, kind: &str, name: &str) -> &'a Value {
    objects(doc, kind).into_iter().find(|o| o["name"] == name).unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// The rule's statements as compact JSON text, for `contains` checks.
fn text(v: &Value) -> String {
    serde_json::to_string(v).unwrap()
}

fn has_stmt(rule: &Value, stmt: Value) -> bool {
    rule["expr"].as_array().unwrap().contains(&stmt)
}

fn m(left: Value, right: Value) -> Value {
    json!({"match": {"op": "==", "left": left, "right": right}})
}

fn payload(p: &str, f: &str) -> Value {
    json!({"payload": {"protocol": p, "field": f}})
}

// ---------------------------------------------------------------------------------------------
// A ruleset that uses every feature

fn kitchen_sink() -> Ruleset {
    let mut ssh = rule(ChainKind::Input, Action::Allow, "ssh");
    ssh.proto = Some(sp(Proto::Tcp));
    ssh.ports = Some(sp(ports("22")));
    ssh.from = addrs("@office");
    let mut web = rule(ChainKind::Input, Action::Allow, "web");
    web.proto = Some(sp(Proto::Tcp));
    web.ports = Some(sp(ports("80,443,8000-8100")));
    let mut ping = rule(ChainKind::Input, Action::Allow, "ping");
    ping.proto = Some(sp(Proto::Icmp));
    let mut ping6 = rule(ChainKind::Input, Action::Allow, "ping6");
    ping6.proto = Some(sp(Proto::Icmpv6));
    ping6.from = addrs("@office");
    let mut blocked = rule(ChainKind::Input, Action::Deny, "blocked");
    blocked.from = addrs("@blocklist");
    blocked.log = true;
    let mut ident = rule(ChainKind::Input, Action::Reject, "ident");
    ident.proto = Some(sp(Proto::Tcp));
    ident.ports = Some(sp(ports("113")));
    let mut dns = rule(ChainKind::Input, Action::Allow, "dns");
    dns.proto = Some(sp(Proto::Both));
    dns.ports = Some(sp(ports("53")));
    dns.rate = rate(50, TimeUnit::Second, None);
    let mut udprej = rule(ChainKind::Input, Action::Reject, "udp-reject");
    udprej.proto = Some(sp(Proto::Udp));
    udprej.sports = Some(sp(ports("1000-2000")));
    udprej.iif = Some(sp(vec!["eth0".into()]));
    udprej.to = addrs("192.0.2.1,2001:db8::1");
    let mut fwd_lan = rule(ChainKind::Forward, Action::Allow, "lan-out");
    fwd_lan.iif = Some(sp(vec!["eth1".into()]));
    fwd_lan.oif = Some(sp(vec!["eth0".into()]));
    fwd_lan.rate = rate(10, TimeUnit::Minute, Some(20));
    let mut out_smtp = rule(ChainKind::Output, Action::Deny, "no-smtp");
    out_smtp.proto = Some(sp(Proto::Tcp));
    out_smtp.ports = Some(sp(ports("25")));
    out_smtp.to = addrs("0.0.0.0/0,::/0");

    let web_fwd = fwd("web", ForwardProto::Tcp, ":8080", "10.0.0.5:80");
    let game = fwd("game", ForwardProto::Udp, ":27015-27020", "10.0.0.6");
    let mut shifted = fwd("shifted", ForwardProto::Both, ":3000-3003", "10.0.0.7:4000-4003");
    shifted.max_conns = Some(sp(100));
    let mut lb = fwd("lb", ForwardProto::Tcp, ":7000", "10.0.0.8:7000,10.0.0.9:7001");
    lb.conn_rate = rate(100, TimeUnit::Second, Some(200));
    let mut office_only = fwd("office-only", ForwardProto::Tcp, ":9443", "10.0.0.10:443");
    office_only.from = addrs("@office");
    office_only.max_conns = Some(sp(10));
    let mut on_addr = fwd("on-addr", ForwardProto::Tcp, "203.0.113.1:80", "10.0.0.11");
    on_addr.max_conns = Some(sp(5)); // a guard on a listen address: `ct original ip daddr`
    let v6 = fwd("v6", ForwardProto::Tcp, ":8443", "[2001:db8:2::5]:443");
    let mut tenant = fwd("tenant-b", ForwardProto::Tcp, ":9000", "10.0.0.7:9000");
    tenant.up = Some(sp(Bandwidth(12_500_000)));
    tenant.down = Some(sp(Bandwidth(25_000_000)));
    let mut api = fwd("api", ForwardProto::Tcp, ":443", "api.internal:8443");
    api.proxy_protocol = Some(sp(2));
    api.from = addrs("@office");
    let mut guests = shape("guests", 2_500_000);
    guests.from = addrs("10.2.0.0/16");
    let mut bulk = shape("bulk", 1_000_000);
    bulk.proto = Some(sp(Proto::Tcp));
    bulk.ports = Some(sp(ports("873")));

    Ruleset {
        hosts: vec![],
        sets: vec![
            addr_set("office", &["203.0.113.0/24", "2001:db8:1::/48"]),
            addr_set("blocklist", &["198.51.100.0/24", "192.0.2.66", "192.0.2.60-192.0.2.70"]),
            addr_set("empty", &[]),
        ],
        chains: vec![
            chain(ChainKind::Input, Policy::Drop, vec![ssh, web, ping, ping6, blocked, ident, dns, udprej]),
            chain(ChainKind::Forward, Policy::Drop, vec![fwd_lan]),
            chain(ChainKind::Output, Policy::Accept, vec![out_smtp]),
        ],
        forwards: vec![web_fwd, game, shifted, lb, office_only, on_addr, v6, tenant, api],
        shapes: vec![guests, bulk],
        rollouts: vec![],
        snats: vec![],
    }
}

// ---------------------------------------------------------------------------------------------
// Structure tests (no privileges)

#[test]
fn empty_ruleset_is_the_skeleton() {
    let doc = emit(&Ruleset::default());
    let c = cmds(&doc);
    assert_eq!(c[0], json!({"add": {"table": {"family": "inet", "name": "fwc"}}}));
    let names: Vec<&str> = objects(&doc, "chain").iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["input", "forward", "output"]);
    for ch in objects(&doc, "chain") {
        assert_eq!(ch["type"], "filter");
        assert_eq!(ch["prio"], 0);
        assert_eq!(ch["policy"], "accept");
        assert_eq!(ch["hook"], ch["name"]);
    }
    let input = chain_rules(&doc, "input");
    assert_eq!(input.len(), 4);
    assert_eq!(
        input[0]["expr"],
        json!([{"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": ["established", "related"]}}, {"accept": null}])
    );
    assert_eq!(input[1]["expr"], json!([m(json!({"meta": {"key": "iif"}}), json!("lo")), {"accept": null}]));
    assert_eq!(
        input[2]["expr"],
        json!([
            m(json!({"meta": {"key": "l4proto"}}), json!("ipv6-icmp")),
            m(payload("icmpv6", "type"), json!({"set": ["nd-neighbor-solicit", "nd-neighbor-advert", "nd-router-solicit", "nd-router-advert"]})),
            {"accept": null}
        ])
    );
    assert_eq!(input[3]["expr"], json!([{"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": "invalid"}}, {"drop": null}]));
    // Output accepts neighbour discovery too (a drop policy must not cut IPv6 off).
    let output = chain_rules(&doc, "output");
    assert_eq!(output.len(), 3);
    assert_eq!(output[2]["expr"], input[2]["expr"]);
    let forward = chain_rules(&doc, "forward");
    assert_eq!(forward.len(), 2);
    assert_eq!(forward[1]["expr"], json!([{"match": {"op": "in", "left": {"ct": {"key": "status"}}, "right": "dnat"}}, {"accept": null}]));
    // No NAT and no QoS chains without forwards and classes.
    assert!(objects(&doc, "map").is_empty());
    // No delete/flush anywhere.
    assert!(c.iter().all(|o| o.get("add").is_some()));
}

#[test]
fn sets_have_both_families_always() {
    let doc = emit(&kitchen_sink());
    let s4 = named(&doc, "set", "office_v4");
    assert_eq!(s4["type"], "ipv4_addr");
    assert_eq!(s4["flags"], json!(["interval"]));
    assert_eq!(s4["elem"], json!([{"prefix": {"addr": "203.0.113.0", "len": 24}}]));
    let s6 = named(&doc, "set", "office_v6");
    assert_eq!(s6["type"], "ipv6_addr");
    assert_eq!(s6["elem"], json!([{"prefix": {"addr": "2001:db8:1::", "len": 48}}]));
    // Overlapping elements are merged (interval sets refuse overlaps).
    assert_eq!(
        named(&doc, "set", "blocklist_v4")["elem"],
        json!([{"range": ["192.0.2.60", "192.0.2.70"]}, {"prefix": {"addr": "198.51.100.0", "len": 24}}])
    );
    assert!(named(&doc, "set", "blocklist_v6").get("elem").is_none());
    assert!(named(&doc, "set", "empty_v4").get("elem").is_none());
    assert!(named(&doc, "set", "empty_v6").get("elem").is_none());
}

#[test]
fn filter_rules_split_by_family_and_carry_comments() {
    let doc = emit(&kitchen_sink());
    let input = chain_rules(&doc, "input");
    // established, lo, nd, invalid, the user rules, then the userspace forward "api"
    // (from=@office: two families) and the DNATed flows of kernel forwards to a local target:
    // forwards obey the user's denies, their accepts only stand in for the policy.
    let api = rules_with_comment(&doc, "fwc:forward:api");
    assert_eq!(api.len(), 2);
    let comments: Vec<&str> = input.iter().map(|r| r["comment"].as_str().unwrap_or("-")).collect();
    let last_user = comments.iter().rposition(|c| c.starts_with("fwc:filter:")).unwrap();
    assert_eq!(&comments[..5], ["-", "-", "-", "-", "fwc:filter:ssh"]);
    assert_eq!(&comments[last_user + 1..], ["fwc:forward:api", "fwc:forward:api", "-"]);
    assert_eq!(
        input.last().unwrap()["expr"],
        json!([{"match": {"op": "in", "left": {"ct": {"key": "status"}}, "right": "dnat"}}, {"accept": null}])
    );
    assert!(has_stmt(api[0], m(payload("tcp", "dport"), json!(443))));
    assert!(has_stmt(api[0], m(payload("ip", "saddr"), json!("@office_v4"))));
    assert!(has_stmt(api[1], m(payload("ip6", "saddr"), json!("@office_v6"))));

    let ssh = rules_with_comment(&doc, "fwc:filter:ssh");
    assert_eq!(ssh.len(), 2, "set with v4 and v6 elements -> two rules");
    assert_eq!(
        ssh[0]["expr"],
        json!([
            m(payload("tcp", "dport"), json!(22)),
            m(payload("ip", "saddr"), json!("@office_v4")),
            {"counter": null},
            {"accept": null}
        ])
    );
    assert!(has_stmt(ssh[1], m(payload("ip6", "saddr"), json!("@office_v6"))));

    let web = rules_with_comment(&doc, "fwc:filter:web");
    assert_eq!(web.len(), 1, "no address match -> one inet rule");
    assert!(has_stmt(web[0], m(payload("tcp", "dport"), json!({"set": [80, 443, {"range": [8000, 8100]}]}))));

    let ping = rules_with_comment(&doc, "fwc:filter:ping");
    assert_eq!(ping[0]["expr"][0], m(json!({"meta": {"key": "l4proto"}}), json!("icmp")));
    // icmpv6 from a dual-stack set: only the IPv6 rule makes sense.
    let ping6 = rules_with_comment(&doc, "fwc:filter:ping6");
    assert_eq!(ping6.len(), 1);
    assert!(has_stmt(ping6[0], m(json!({"meta": {"key": "l4proto"}}), json!("ipv6-icmp"))));
    assert!(has_stmt(ping6[0], m(payload("ip6", "saddr"), json!("@office_v6"))));

    // The blocklist has no IPv6 elements: one rule; log before counter and verdict.
    let blocked = rules_with_comment(&doc, "fwc:filter:blocked");
    assert_eq!(blocked.len(), 1);
    let e = blocked[0]["expr"].as_array().unwrap();
    assert_eq!(e[e.len() - 3], json!({"log": {"prefix": "fwc blocked: "}}));
    assert_eq!(e[e.len() - 2], json!({"counter": null}));
    assert_eq!(e[e.len() - 1], json!({"drop": null}));

    let ident = rules_with_comment(&doc, "fwc:filter:ident");
    assert_eq!(ident[0]["expr"].as_array().unwrap().last().unwrap(), &json!({"reject": {"type": "tcp reset"}}));

    let dns = rules_with_comment(&doc, "fwc:filter:dns");
    assert_eq!(
        dns[0]["expr"],
        json!([
            m(json!({"meta": {"key": "l4proto"}}), json!({"set": ["tcp", "udp"]})),
            m(payload("th", "dport"), json!(53)),
            {"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": "new"}},
            {"limit": {"rate": 50, "per": "second", "burst": 5}},
            {"counter": null},
            {"accept": null}
        ])
    );

    let udprej = rules_with_comment(&doc, "fwc:filter:udp-reject");
    assert_eq!(udprej.len(), 2);
    assert_eq!(udprej[0]["expr"][0], m(json!({"meta": {"key": "iifname"}}), json!("eth0")));
    assert!(has_stmt(udprej[0], m(payload("udp", "sport"), json!({"range": [1000, 2000]}))));
    assert!(has_stmt(udprej[0], m(payload("ip", "daddr"), json!("192.0.2.1"))));
    assert!(has_stmt(udprej[1], m(payload("ip6", "daddr"), json!("2001:db8::1"))));
    assert_eq!(
        udprej[0]["expr"].as_array().unwrap().last().unwrap(),
        &json!({"reject": {"type": "icmpx", "expr": "port-unreachable"}})
    );

    let lan = rules_with_comment(&doc, "fwc:filter:lan-out");
    assert_eq!(lan[0]["chain"], "forward");
    assert!(has_stmt(lan[0], m(json!({"meta": {"key": "oifname"}}), json!("eth0"))));
    assert!(has_stmt(lan[0], json!({"limit": {"rate": 10, "per": "minute", "burst": 20}})));

    let smtp = rules_with_comment(&doc, "fwc:filter:no-smtp");
    assert_eq!(smtp.len(), 2);
    assert_eq!(smtp[0]["chain"], "output");
    assert!(has_stmt(smtp[0], m(payload("ip", "daddr"), json!({"prefix": {"addr": "0.0.0.0", "len": 0}}))));

    // User rules keep file order after the fixed prologue.
    let order: Vec<&str> = input.iter().filter_map(|r| r["comment"].as_str()).collect();
    let mut dedup = order.clone();
    dedup.dedup();
    assert_eq!(
        dedup,
        [
            "fwc:filter:ssh",
            "fwc:filter:web",
            "fwc:filter:ping",
            "fwc:filter:ping6",
            "fwc:filter:blocked",
            "fwc:filter:ident",
            "fwc:filter:dns",
            "fwc:filter:udp-reject",
            "fwc:forward:api"
        ]
    );
    // Every chain policy comes from the plan.
    assert_eq!(named(&doc, "chain", "input")["policy"], "drop");
    assert_eq!(named(&doc, "chain", "output")["policy"], "accept");
}

#[test]
fn kernel_forwards_use_maps() {
    let doc = emit(&kitchen_sink());
    let a4 = named(&doc, "map", maps::FWD4_ADDR);
    assert_eq!(a4["type"], json!(["inet_proto", "inet_service"]));
    assert_eq!(a4["map"], "ipv4_addr");
    // Exact ports: hash maps (no interval flag), with per-element counters.
    assert!(a4.get("flags").is_none(), "{a4}");
    assert_eq!(a4["stmt"], json!([{"counter": null}]));
    let a4e = text(&a4["elem"]);
    assert!(a4e.contains(r#"[{"elem":{"val":{"concat":["tcp",8080]},"comment":"fwc:forward:web"}},"10.0.0.5"]"#), "{a4e}");
    assert!(!a4e.contains("range"), "{a4e}");
    let p4m = named(&doc, "map", maps::FWD4_PORT);
    assert!(p4m.get("flags").is_none() && p4m.get("stmt").is_none(), "{p4m}");
    let p4 = text(&p4m["elem"]);
    assert!(p4.contains(r#"[{"concat":["tcp",8080]},80]"#), "{p4}");
    assert!(!p4.contains("3002"), "{p4}");
    // Port ranges: interval maps.
    let ra4 = named(&doc, "map", maps::FWD4R_ADDR);
    assert_eq!((&ra4["map"], &ra4["flags"], &ra4["stmt"]), (&json!("ipv4_addr"), &json!(["interval"]), &json!([{"counter": null}])));
    let ra4e = text(&ra4["elem"]);
    assert!(ra4e.contains(r#"{"concat":["udp",{"range":[3000,3003]}]},"comment":"fwc:forward:shifted"}},"10.0.0.7"]"#), "{ra4e}");
    let rp4m = named(&doc, "map", maps::FWD4R_PORT);
    assert_eq!((&rp4m["map"], &rp4m["flags"]), (&json!("inet_service"), &json!(["interval"])));
    // A range onto another range keeps the offset, port by port.
    let rp4 = text(&rp4m["elem"]);
    assert!(rp4.contains(r#"[{"concat":["tcp",3002]},4002]"#), "{rp4}");
    assert!(rp4.contains(r#"[{"concat":["udp",3003]},4003]"#), "{rp4}");
    // A range without target port keeps the port.
    let k4m = named(&doc, "map", maps::FWD4_KEEP);
    assert_eq!(k4m["flags"], json!(["interval"]));
    let k4 = text(&k4m["elem"]);
    assert_eq!(k4, r#"[[{"elem":{"val":{"concat":["udp",{"range":[27015,27020]}]},"comment":"fwc:forward:game"}},"10.0.0.6"]]"#);
    let a6 = text(&named(&doc, "map", maps::FWD6_ADDR)["elem"]);
    assert!(a6.contains(r#""comment":"fwc:forward:v6"}},"2001:db8:2::5"]"#), "{a6}");
    assert!(named(&doc, "map", maps::FWD6_ADDR).get("flags").is_none());
    assert_eq!(named(&doc, "map", maps::FWD6_PORT)["map"], "inet_service");
    assert_eq!(named(&doc, "map", maps::FWD6R_ADDR)["flags"], json!(["interval"]));
    assert!(named(&doc, "map", maps::FWD6R_ADDR).get("elem").is_none());

    // Masquerade ports.
    assert_eq!(
        named(&doc, "set", maps::PORTS_TCP)["elem"],
        json!([80, {"range": [3000, 3003]}, 7000, 8080, 8443, 9000, 9443])
    );
    assert_eq!(named(&doc, "set", maps::PORTS_UDP)["elem"], json!([{"range": [3000, 3003]}, {"range": [27015, 27020]}]));
    let post = chain_rules(&doc, chains::POSTROUTING);
    assert_eq!(post.len(), 2);
    assert_eq!(
        post[0]["expr"],
        json!([
            {"match": {"op": "in", "left": {"ct": {"key": "status"}}, "right": "dnat"}},
            m(json!({"meta": {"key": "l4proto"}}), json!("tcp")),
            m(json!({"ct": {"key": "proto-dst", "dir": "original"}}), json!("@fwd_ports_tcp")),
            {"masquerade": null}
        ])
    );

    // Hooks.
    let pre = named(&doc, "chain", chains::PREROUTING);
    assert_eq!((pre["type"].as_str(), pre["hook"].as_str(), pre["prio"].as_i64()), (Some("nat"), Some("prerouting"), Some(-100)));
    let out = named(&doc, "chain", chains::NAT_OUTPUT);
    assert_eq!((out["type"].as_str(), out["hook"].as_str(), out["prio"].as_i64()), (Some("nat"), Some("output"), Some(-100)));
    let post = named(&doc, "chain", chains::POSTROUTING);
    assert_eq!((post["hook"].as_str(), post["prio"].as_i64()), (Some("postrouting"), Some(100)));
    for c in [chains::PREROUTING, chains::NAT_OUTPUT] {
        assert_eq!(
            chain_rules(&doc, c)[0]["expr"],
            json!([m(json!({"fib": {"result": "type", "flags": ["daddr"]}}), json!("local")), {"jump": {"target": "fwd_dnat"}}])
        );
    }

    // fwd_dnat: own rules (specific first), then the six map rules.
    let dnat = chain_rules(&doc, chains::FWD_DNAT);
    let comments: Vec<&str> = dnat.iter().map(|r| r["comment"].as_str().unwrap_or("-")).collect();
    assert_eq!(comments, ["fwc:forward:office-only", "fwc:forward:on-addr", "fwc:forward:lb", "-", "-", "-", "-", "-", "-"]);
    // office-only: the office set has v4 and v6 elements but the target is v4 -> only ip.
    assert_eq!(rules_with_comment(&doc, "fwc:forward:office-only").iter().filter(|r| r["chain"] == "fwd_dnat").count(), 1);
    let office = dnat[0];
    assert!(has_stmt(office, m(payload("ip", "saddr"), json!("@office_v4"))));
    assert!(has_stmt(office, json!({"dnat": {"addr": "10.0.0.10", "family": "ip", "port": 443}})));
    let on_addr = dnat[1];
    assert!(has_stmt(on_addr, m(payload("ip", "daddr"), json!("203.0.113.1"))));
    assert!(has_stmt(on_addr, json!({"dnat": {"addr": "10.0.0.11", "family": "ip", "port": 80}})));
    let lb = dnat[2];
    assert!(has_stmt(
        lb,
        json!({"dnat": {"family": "ip", "addr": {"map": {
            "key": {"numgen": {"mode": "inc", "mod": 2}},
            "data": {"set": [[0, {"concat": ["10.0.0.8", 7000]}], [1, {"concat": ["10.0.0.9", 7001]}]]}
        }}}})
    ));
    let key = json!({"concat": [{"meta": {"key": "l4proto"}}, payload("th", "dport")]});
    // The map rules look up only their own family's packets.
    assert_eq!(
        dnat[3]["expr"],
        json!([
            m(json!({"meta": {"key": "nfproto"}}), json!("ipv4")),
            m(json!({"meta": {"key": "l4proto"}}), json!({"set": ["tcp", "udp"]})),
            {"dnat": {"family": "ip",
                "addr": {"map": {"key": key, "data": "@fwd4_addr"}},
                "port": {"map": {"key": key, "data": "@fwd4_port"}}}}
        ])
    );
    // Then the port ranges, then the keep-port ranges.
    assert_eq!(dnat[4]["expr"][0], m(json!({"meta": {"key": "nfproto"}}), json!("ipv4")));
    assert_eq!(
        dnat[4]["expr"][2],
        json!({"dnat": {"family": "ip", "addr": {"map": {"key": key, "data": "@fwd4r_addr"}}, "port": {"map": {"key": key, "data": "@fwd4r_port"}}}})
    );
    assert_eq!(dnat[5]["expr"][0], m(json!({"meta": {"key": "nfproto"}}), json!("ipv4")));
    assert_eq!(dnat[5]["expr"][2], json!({"dnat": {"family": "ip", "addr": {"map": {"key": key, "data": "@fwd4_keep"}}}}));
    for r in &dnat[6..9] {
        assert_eq!(r["expr"][0], m(json!({"meta": {"key": "nfproto"}}), json!("ipv6")));
        assert_eq!(r["expr"][2]["dnat"]["family"], "ip6");
    }
    let data = |r: &&Value| r["expr"][2]["dnat"]["addr"]["map"]["data"].clone();
    assert_eq!(dnat[6..9].iter().map(data).collect::<Vec<_>>(), [json!("@fwd6_addr"), json!("@fwd6r_addr"), json!("@fwd6_keep")]);
}

#[test]
fn forward_guards_shared_by_forward_and_output() {
    let doc = emit(&kitchen_sink());
    let jump = json!([{"jump": {"target": "fwd_guard"}}]);
    let dnat_accept = json!([{"match": {"op": "in", "left": {"ct": {"key": "status"}}, "right": "dnat"}}, {"accept": null}]);
    // forward: established, jump to the guards, user rules, then ct status dnat accept
    // (forwards obey the user's rules: the accept only stands in for the policy).
    let fw = chain_rules(&doc, "forward");
    let comments: Vec<&str> = fw.iter().map(|r| r["comment"].as_str().unwrap_or("-")).collect();
    assert_eq!(comments, ["-", "-", "fwc:filter:lan-out", "-", "-", "-", "-", "-"]);
    assert_eq!(fw[1]["expr"], jump);
    assert_eq!(fw[3]["expr"], dnat_accept);
    // policy=drop: then the containers' own traffic, one accept per default bridge.
    let bridges: Vec<&Value> = fw[4..].iter().map(|r| &r["expr"][0]["match"]["right"]).collect();
    assert_eq!(bridges, [&json!("docker0"), &json!("br-*"), &json!("podman*"), &json!("cni-podman*")]);
    // output: the same guards for clients on the host, then their DNATed flows pass.
    let out = chain_rules(&doc, "output");
    assert_eq!(out[1]["expr"], jump, "before `oif lo accept`: local clients connect to a local address");
    assert_eq!(out[2]["expr"], json!([m(json!({"meta": {"key": "oif"}}), json!("lo")), {"accept": null}]));
    let i = out.iter().position(|r| r["expr"] == dnat_accept).expect("output accepts DNATed flows");
    assert_eq!(out[i + 1]["comment"], "fwc:filter:no-smtp", "fwc's accepts come before the user rules");

    let guard = chain_rules(&doc, chains::FWD_GUARD);
    let comments: Vec<&str> = guard.iter().map(|r| r["comment"].as_str().unwrap_or("-")).collect();
    assert_eq!(
        comments,
        [
            "fwc:forward:lb",
            "fwc:forward:office-only",
            "fwc:forward:office-only",
            "fwc:forward:on-addr",
            "fwc:forward:shifted",
            "fwc:forward:shifted"
        ]
    );
    assert_eq!(
        guard[0]["expr"],
        json!([
            {"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": "new"}},
            {"match": {"op": "in", "left": {"ct": {"key": "status"}}, "right": "dnat"}},
            m(json!({"meta": {"key": "l4proto"}}), json!("tcp")),
            m(json!({"ct": {"key": "proto-dst", "dir": "original"}}), json!(7000)),
            {"limit": {"rate": 100, "per": "second", "burst": 200, "inv": true}},
            {"counter": null},
            {"drop": null}
        ])
    );
    // from=@office has both families -> one guard per family.
    assert!(has_stmt(guard[1], json!({"ct count": {"val": 10, "inv": true}})));
    assert!(has_stmt(guard[1], m(payload("ip", "saddr"), json!("@office_v4"))));
    assert!(has_stmt(guard[2], m(payload("ip6", "saddr"), json!("@office_v6"))));
    assert!(has_stmt(guard[1], json!({"reject": {"type": "tcp reset"}})));
    // A listen address: nft's JSON puts the family into the ct key (1.0.6 refuses "family").
    assert!(has_stmt(guard[3], m(json!({"ct": {"key": "ip daddr", "dir": "original"}}), json!("203.0.113.1"))));
    // proto=both: one guard per protocol (tcp reset for tcp, icmpx for udp).
    assert!(has_stmt(guard[4], m(json!({"ct": {"key": "proto-dst", "dir": "original"}}), json!({"range": [3000, 3003]}))));
    assert!(has_stmt(guard[4], m(json!({"meta": {"key": "l4proto"}}), json!("tcp"))));
    assert!(has_stmt(guard[4], json!({"reject": {"type": "tcp reset"}})));
    assert!(has_stmt(guard[5], m(json!({"meta": {"key": "l4proto"}}), json!("udp"))));
    assert!(has_stmt(guard[5], json!({"reject": {"type": "icmpx", "expr": "port-unreachable"}})));

    // Without guards there is no guard chain and no jump.
    let plain = emit(&Ruleset { forwards: vec![fwd("web", ForwardProto::Tcp, ":8080", "10.0.0.5:80")], ..Ruleset::default() });
    assert!(objects(&plain, "chain").iter().all(|c| c["name"] != chains::FWD_GUARD));
    assert!(!text(&plain).contains("fwd_guard"));
    // ... but local clients' DNATed flows still pass output.
    assert!(chain_rules(&plain, "output").iter().any(|r| r["expr"] == dnat_accept));
    // Without kernel forwards output accepts no DNATed flows (of other tables).
    assert!(!chain_rules(&emit(&Ruleset::default()), "output").iter().any(|r| r["expr"] == dnat_accept));
}

#[test]
fn conn_rate_burst_defaults_to_the_count() {
    // The userspace forwarder uses burst = count when none is given; the kernel must too
    // (nft's default burst is 5).
    let mut a = fwd("a", ForwardProto::Tcp, ":8000", "10.0.0.1:80");
    a.conn_rate = rate(30, TimeUnit::Minute, None);
    let mut b = fwd("b", ForwardProto::Tcp, ":8001", "10.0.0.1:80");
    b.conn_rate = rate(2, TimeUnit::Second, Some(7));
    let doc = emit(&Ruleset { forwards: vec![a, b], ..Ruleset::default() });
    assert!(has_stmt(rules_with_comment(&doc, "fwc:forward:a")[0], json!({"limit": {"rate": 30, "per": "minute", "burst": 30, "inv": true}})));
    assert!(has_stmt(rules_with_comment(&doc, "fwc:forward:b")[0], json!({"limit": {"rate": 2, "per": "second", "burst": 7, "inv": true}})));
    // Filter rule rates keep nft's default burst.
    let mut r = rule(ChainKind::Input, Action::Allow, "r");
    r.rate = rate(10, TimeUnit::Second, None);
    let doc = emit(&Ruleset { chains: vec![chain(ChainKind::Input, Policy::Accept, vec![r])], ..Ruleset::default() });
    assert!(has_stmt(rules_with_comment(&doc, "fwc:filter:r")[0], json!({"limit": {"rate": 10, "per": "second", "burst": 5}})));
}

#[test]
fn output_lets_the_forwarder_out() {
    let mut ip = fwd("legacy", ForwardProto::Tcp, ":2222", "10.0.0.9:22,10.0.0.10:22,[2001:db8::9]");
    ip.backend = sp(BackendChoice::Userspace);
    let mut range = fwd("range", ForwardProto::Both, ":5000-5003", "10.0.0.9:6000-6003");
    range.backend = sp(BackendChoice::Userspace);
    let rs = Ruleset {
        chains: vec![chain(ChainKind::Output, Policy::Drop, vec![])],
        forwards: vec![ip.clone(), range.clone()],
        ..Ruleset::default()
    };
    let doc = emit(&rs);
    let legacy = chain_rules(&doc, "output").into_iter().filter(|r| r["comment"] == "fwc:forward:legacy").collect::<Vec<_>>();
    assert_eq!(legacy.len(), 2, "one rule per (family, target ports)");
    assert_eq!(
        legacy[0]["expr"],
        json!([m(payload("tcp", "dport"), json!(22)), m(payload("ip", "daddr"), json!({"set": ["10.0.0.9", "10.0.0.10"]})), {"accept": null}])
    );
    // A target without port: the forwarder connects to the listen port.
    assert_eq!(
        legacy[1]["expr"],
        json!([m(payload("tcp", "dport"), json!(2222)), m(payload("ip6", "daddr"), json!("2001:db8::9")), {"accept": null}])
    );
    let r = chain_rules(&doc, "output").into_iter().find(|r| r["comment"] == "fwc:forward:range").unwrap();
    assert!(has_stmt(r, m(payload("th", "dport"), json!({"range": [6000, 6003]}))));
    // No DNS target: no mark accept.
    assert!(!text(&doc).contains(&nft::FORWARDER_SOCKET_MARK.to_string()));

    // (userspace: a DNS target alone would be a kernel forward)
    let mut dns = fwd("api", ForwardProto::Tcp, ":443", "api.internal:8443");
    dns.backend = sp(BackendChoice::Userspace);
    let doc = emit(&Ruleset { chains: vec![chain(ChainKind::Output, Policy::Drop, vec![])], forwards: vec![dns], ..Ruleset::default() });
    let mark = nft::FORWARDER_SOCKET_MARK;
    assert_eq!(mark & fwc_compiler::artifacts::QOS_MARK_MASK, 0);
    assert!(chain_rules(&doc, "output").iter().any(|r| r["expr"]
        == json!([{"match": {"op": "==", "left": {"&": [{"meta": {"key": "mark"}}, mark]}, "right": mark}}, {"accept": null}])));
}

#[test]
fn qos_marks_only_touch_the_mask() {
    use fwc_compiler::artifacts::{QOS_MARK_MASK, QOS_MARK_SHIFT};
    let rs = kitchen_sink();
    let host = implicit_host();
    let plan = plan_host(&rs, &host);
    let doc = nft::emit(&plan);
    let class = |kind: RuleKind, rule: &str| plan.qos_classes.iter().filter(|c| c.kind == kind && c.rule == rule).collect::<Vec<_>>();
    let tenant = class(RuleKind::Forward, "tenant-b");
    assert_eq!(tenant.len(), 2);
    let up = tenant.iter().find(|c| c.id % 2 == 0).unwrap();
    let guests = class(RuleKind::Shape, "guests")[0];

    for (c, hook) in [(chains::QOS_MARK, "prerouting"), (chains::QOS_MARK_OUT, "output"), (chains::QOS_APPLY, "postrouting")] {
        let ch = named(&doc, "chain", c);
        assert_eq!((ch["type"].as_str(), ch["hook"].as_str(), ch["prio"].as_i64()), (Some("filter"), Some(hook), Some(-150)));
    }
    assert_eq!(
        chain_rules(&doc, chains::QOS_MARK)[0]["expr"],
        json!([{"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": "new"}}, {"jump": {"target": "qos_classify"}}])
    );
    // Only capped forwards classify flows; shapes are matched per packet in qos_apply.
    let classify = chain_rules(&doc, chains::QOS_CLASSIFY);
    let comments: Vec<&str> = classify.iter().map(|r| r["comment"].as_str().unwrap()).collect();
    assert_eq!(comments, ["fwc:forward:tenant-b"]);
    let t = classify[0];
    assert_eq!(
        t["expr"],
        json!([
            m(payload("tcp", "dport"), json!(9000)),
            m(json!({"meta": {"key": "nfproto"}}), json!("ipv4")),
            m(json!({"fib": {"result": "type", "flags": ["daddr"]}}), json!("local")),
            {"mangle": {"key": {"ct": {"key": "mark"}}, "value": {"|": [{"&": [{"ct": {"key": "mark"}}, !QOS_MARK_MASK]}, up.mark]}}},
            {"counter": null},
            {"return": null}
        ])
    );

    // One chain per class that ORs the class mark into meta mark, only inside the mask.
    for c in &plan.qos_classes {
        let r = chain_rules(&doc, &format!("qos_c{}", c.id));
        assert_eq!(r.len(), 1);
        assert_eq!(
            r[0]["expr"][0],
            json!({"mangle": {"key": {"meta": {"key": "mark"}}, "value": {"|": [{"&": [{"meta": {"key": "mark"}}, !QOS_MARK_MASK]}, c.id << QOS_MARK_SHIFT]}}})
        );
        assert_eq!(c.mark & !QOS_MARK_MASK, 0);
    }
    // The apply chain: ct mark class bits -> class chain; replies of a forward use the down
    // class. Then the shapes, per packet.
    let apply = chain_rules(&doc, chains::QOS_APPLY);
    let comments: Vec<&str> = apply.iter().map(|r| r["comment"].as_str().unwrap_or("-")).collect();
    assert_eq!(comments, ["-", "-", "fwc:shape:bulk", "fwc:shape:guests"]);
    assert_eq!(apply[0]["expr"][0], m(json!({"ct": {"key": "direction"}}), json!("original")));
    let vmap = |r: &Value| r["expr"][1]["vmap"].clone();
    assert_eq!(vmap(apply[0])["key"], json!({"&": [{"ct": {"key": "mark"}}, QOS_MARK_MASK]}));
    let orig = text(&vmap(apply[0])["data"]);
    let reply = text(&vmap(apply[1])["data"]);
    assert!(orig.contains(&format!("[{},{{\"goto\":{{\"target\":\"qos_c{}\"}}}}]", up.mark, up.id)), "{orig}");
    assert!(reply.contains(&format!("[{},{{\"goto\":{{\"target\":\"qos_c{}\"}}}}]", up.mark, up.id + 1)), "{reply}");
    assert!(!orig.contains(&guests.mark.to_string()) && !reply.contains(&guests.mark.to_string()), "shapes use no ct mark");
    assert_eq!(
        apply[3]["expr"],
        json!([
            m(json!({"meta": {"key": "oifname"}}), json!("eth1")),
            m(json!({"ct": {"key": "ip saddr", "dir": "original"}}), json!({"prefix": {"addr": "10.2.0.0", "len": 16}})),
            {"goto": {"target": format!("qos_c{}", guests.id)}}
        ])
    );
}

fn shaped(name: &str, devs: &[&str], direction: Direction) -> ShapeRule {
    let mut s = shape(name, 1_000_000);
    s.devs = devs.iter().map(|d| sp(d.to_string())).collect();
    s.direction = direction;
    s
}

#[test]
fn shapes_match_dev_direction_and_most_specific_first() {
    let all = shaped("a-all", &["eth0"], Direction::Egress);
    let mut guests = shaped("guests", &["eth0"], Direction::Egress);
    guests.from = addrs("@guests");
    let mut voip = shaped("voip", &[], Direction::Egress);
    voip.proto = Some(sp(Proto::Udp));
    voip.ports = Some(sp(ports("5060-5080,10000-20000")));
    let mut lab = shaped("lab", &["eth3", "eth2"], Direction::Ingress);
    lab.proto = Some(sp(Proto::Both));
    let any_in = shaped("any-in", &[], Direction::Ingress);
    let mut any_in = any_in;
    any_in.to = addrs("10.9.0.0/16");
    let rs = Ruleset {
        sets: vec![addr_set("guests", &["10.2.0.0/16", "fd00:2::/64"])],
        shapes: vec![all, guests, voip, lab, any_in],
        ..Ruleset::default()
    };
    let host = implicit_host();
    let plan = plan_host(&rs, &host);
    let doc = nft::emit(&plan);
    let id = |name: &str| plan.qos_classes.iter().find(|c| c.rule == name).unwrap().id;
    let goto = |name: &str| json!({"goto": {"target": format!("qos_c{}", id(name))}});
    // No forward classes: no flow classification at all.
    for c in [chains::QOS_CLASSIFY, chains::QOS_MARK, chains::QOS_MARK_OUT] {
        assert!(objects(&doc, "chain").iter().all(|o| o["name"] != c), "{c}");
    }
    let apply = chain_rules(&doc, chains::QOS_APPLY);
    let comments: Vec<&str> = apply.iter().map(|r| r["comment"].as_str().unwrap()).collect();
    // Most match properties first (guests: dev+from, lab: dev+proto, voip: proto+port), then
    // any-in (to), a-all (dev) — a catch-all never shadows a more specific shape.
    assert_eq!(
        comments,
        ["fwc:shape:guests", "fwc:shape:guests", "fwc:shape:lab", "fwc:shape:voip", "fwc:shape:a-all", "fwc:shape:any-in"]
    );
    // Egress: the interface the packet leaves through.
    assert_eq!(apply[4]["expr"], json!([m(json!({"meta": {"key": "oifname"}}), json!("eth0")), goto("a-all")]));
    assert_eq!(
        apply[1]["expr"],
        json!([
            m(json!({"meta": {"key": "oifname"}}), json!("eth0")),
            m(json!({"ct": {"key": "ip6 saddr", "dir": "original"}}), json!("@guests_v6")),
            goto("guests")
        ])
    );
    // Ingress: the interface the packet arrived on.
    assert_eq!(
        apply[2]["expr"],
        json!([
            m(json!({"meta": {"key": "iifname"}}), json!({"set": ["eth2", "eth3"]})),
            m(json!({"meta": {"key": "l4proto"}}), json!({"set": ["tcp", "udp"]})),
            goto("lab")
        ])
    );
    // Ingress without dev: every packet that arrived (not sent by the host itself).
    assert_eq!(
        apply[5]["expr"],
        json!([
            {"match": {"op": "!=", "left": {"meta": {"key": "iif"}}, "right": 0}},
            m(json!({"ct": {"key": "ip daddr", "dir": "original"}}), json!({"prefix": {"addr": "10.9.0.0", "len": 16}})),
            goto("any-in")
        ])
    );
    // Ports: the connection's destination port, against a named set (typed by the set).
    let p = format!("qos_p{}", id("voip"));
    assert_eq!(named(&doc, "set", &p)["elem"], json!([{"range": [5060, 5080]}, {"range": [10000, 20000]}]));
    assert_eq!(
        apply[3]["expr"],
        json!([
            m(json!({"meta": {"key": "l4proto"}}), json!("udp")),
            m(json!({"ct": {"key": "proto-dst", "dir": "original"}}), json!(format!("@{p}"))),
            goto("voip")
        ])
    );
    // qos.json: an ingress shape's traffic leaves through any interface, so its class is
    // attached everywhere (empty); an egress shape only on its devs.
    let class = |name: &str| plan.qos_classes.iter().find(|c| c.rule == name).unwrap();
    assert_eq!(class("lab").interfaces, Vec::<String>::new());
    assert_eq!(class("a-all").interfaces, ["eth0"]);
    assert_eq!(class("voip").interfaces, Vec::<String>::new());
}

fn many_forwards(n: u16) -> Ruleset {
    let forwards = (0..n)
        .map(|i| {
            let proto = if i % 3 == 0 { ForwardProto::Udp } else { ForwardProto::Tcp };
            let target = if i % 5 == 0 { format!("[2001:db8:2::{:x}]:80", i + 1) } else { format!("10.1.{}.{}:80", i / 250, i % 250 + 1) };
            fwd(&format!("f{i:05}"), proto, &format!(":{}", 20000 + i), &target)
        })
        .collect();
    Ruleset { forwards, ..Ruleset::default() }
}

#[test]
fn rule_count_does_not_grow_with_forwards() {
    let small = emit(&many_forwards(10));
    let big = emit(&many_forwards(10_000));
    assert_eq!(objects(&small, "rule").len(), objects(&big, "rule").len());
    let a4 = named(&big, "map", maps::FWD4_ADDR)["elem"].as_array().unwrap().len();
    let a6 = named(&big, "map", maps::FWD6_ADDR)["elem"].as_array().unwrap().len();
    assert_eq!(a4 + a6, 10_000);
    // All exact ports: the interval maps stay empty.
    for m in [maps::FWD4R_ADDR, maps::FWD6R_ADDR, maps::FWD4_KEEP, maps::FWD6_KEEP] {
        assert!(named(&big, "map", m).get("elem").is_none(), "{m}");
    }
}

#[test]
fn exact_ports_in_hash_maps_ranges_in_interval_maps() {
    let rs = Ruleset {
        forwards: vec![
            fwd("one", ForwardProto::Tcp, ":8000", "10.0.0.1:80"),
            fwd("range-to-one", ForwardProto::Udp, ":5000-5010", "10.0.0.2:53"),
            fwd("one6", ForwardProto::Both, ":8001", "[2001:db8::1]"),
            fwd("range6", ForwardProto::Tcp, ":6000-6001", "[2001:db8::2]:7000-7001"),
        ],
        ..Ruleset::default()
    };
    let doc = emit(&rs);
    let elems = |name: &str| text(&named(&doc, "map", name)["elem"]);
    assert_eq!(elems(maps::FWD4_ADDR), r#"[[{"elem":{"val":{"concat":["tcp",8000]},"comment":"fwc:forward:one"}},"10.0.0.1"]]"#);
    assert_eq!(elems(maps::FWD4_PORT), r#"[[{"concat":["tcp",8000]},80]]"#);
    // A range onto one port: one interval element in each range map.
    assert_eq!(
        elems(maps::FWD4R_ADDR),
        r#"[[{"elem":{"val":{"concat":["udp",{"range":[5000,5010]}]},"comment":"fwc:forward:range-to-one"}},"10.0.0.2"]]"#
    );
    assert_eq!(elems(maps::FWD4R_PORT), r#"[[{"concat":["udp",{"range":[5000,5010]}]},53]]"#);
    // Without a target port an exact listen port is kept: still a hash map element.
    assert_eq!(
        elems(maps::FWD6_PORT),
        r#"[[{"concat":["tcp",8001]},8001],[{"concat":["udp",8001]},8001]]"#
    );
    assert_eq!(elems(maps::FWD6R_PORT), r#"[[{"concat":["tcp",6000]},7000],[{"concat":["tcp",6001]},7001]]"#);
    for m in [maps::FWD4_KEEP, maps::FWD6_KEEP] {
        assert!(named(&doc, "map", m).get("elem").is_none());
    }
    for (m, interval) in [
        (maps::FWD4_ADDR, false),
        (maps::FWD4_PORT, false),
        (maps::FWD6_ADDR, false),
        (maps::FWD6_PORT, false),
        (maps::FWD4R_ADDR, true),
        (maps::FWD4R_PORT, true),
        (maps::FWD6R_ADDR, true),
        (maps::FWD6R_PORT, true),
        (maps::FWD4_KEEP, true),
        (maps::FWD6_KEEP, true),
    ] {
        assert_eq!(named(&doc, "map", m).get("flags").is_some(), interval, "{m}");
    }
}

#[test]
fn overlapping_map_forwards_do_not_break_the_map() {
    let rs = Ruleset {
        forwards: vec![fwd("a", ForwardProto::Tcp, ":8000-8010", "10.0.0.1"), fwd("b", ForwardProto::Tcp, ":8005", "10.0.0.2:80")],
        ..Ruleset::default()
    };
    let doc = emit(&rs);
    assert_eq!(named(&doc, "map", maps::FWD4_KEEP)["elem"].as_array().unwrap().len(), 1);
    assert!(named(&doc, "map", maps::FWD4_ADDR).get("elem").is_none());
    // "b" becomes its own rule after the map rules (so "a", first by name, wins).
    let dnat = chain_rules(&doc, chains::FWD_DNAT);
    assert_eq!(dnat.last().unwrap()["comment"], "fwc:forward:b");
    // The masquerade set merges the overlap.
    assert_eq!(named(&doc, "set", maps::PORTS_TCP)["elem"], json!([{"range": [8000, 8010]}]));
}

#[test]
fn multi_target_port_shapes() {
    let rs = Ruleset {
        forwards: vec![
            fwd("keep", ForwardProto::Tcp, ":5000-5010", "10.0.0.1,10.0.0.2"),
            fwd("mixed", ForwardProto::Tcp, ":6000-6002", "10.0.0.1,10.0.0.2:7000"),
            fwd("dual", ForwardProto::Tcp, ":4000", "10.0.0.1:80,[2001:db8::1]:80"),
        ],
        ..Ruleset::default()
    };
    let doc = emit(&rs);
    let keep = rules_with_comment(&doc, "fwc:forward:keep");
    assert_eq!(keep.len(), 1);
    assert!(has_stmt(
        keep[0],
        json!({"dnat": {"family": "ip", "addr": {"map": {"key": {"numgen": {"mode": "inc", "mod": 2}}, "data": {"set": [[0, "10.0.0.1"], [1, "10.0.0.2"]]}}}}})
    ));
    // Keep-port and fixed-port targets on a range: one rule per listen port.
    let mixed = rules_with_comment(&doc, "fwc:forward:mixed");
    assert_eq!(mixed.len(), 3);
    assert!(text(mixed[1]).contains(r#"[0,{"concat":["10.0.0.1",6001]}],[1,{"concat":["10.0.0.2",7000]}]"#));
    // Targets of both families: one rule per family (no numgen for a single target).
    let dual = rules_with_comment(&doc, "fwc:forward:dual");
    assert_eq!(dual.len(), 2);
    assert!(has_stmt(dual[0], json!({"dnat": {"addr": "10.0.0.1", "family": "ip", "port": 80}})));
    assert!(has_stmt(dual[1], json!({"dnat": {"addr": "2001:db8::1", "family": "ip6", "port": 80}})));
}

#[test]
fn output_is_deterministic() {
    let a = serde_json::to_string(&emit(&kitchen_sink())).unwrap();
    let b = serde_json::to_string(&emit(&kitchen_sink())).unwrap();
    assert_eq!(a, b);
}

// ---------------------------------------------------------------------------------------------
// Privileged: load into a throwaway namespace

use fwc_testkit::{privileged, Netns, Topology};

/// Check, load and list back `doc` inside `ns`; returns the listed ruleset (JSON).
fn load(ns: &Netns, doc: &Value) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nftables.json");
    std::fs::write(&path, serde_json::to_string_pretty(doc).unwrap()).unwrap();
    let p = path.to_str().unwrap();
    let check = ns.try_exec(&["nft", "-j", "-c", "-f", p]);
    assert!(check.status.success(), "nft -j -c failed ({}): {}", check.status, String::from_utf8_lossy(&check.stderr));
    let out = ns.try_exec(&["nft", "-j", "-f", p]);
    assert!(out.status.success(), "nft -j -f failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(&ns.exec(&["nft", "-j", "list", "table", "inet", "fwc"])).unwrap()
}

fn listed<'a>(doc: &'a Value, kind: &str) -> Vec<&'a Value> {
    cmds(doc).iter().filter_map(|o| o.get(kind)).collect()
}

#[test]
fn privileged_rulesets_load() {
    if !privileged("privileged_rulesets_load") {
        return;
    }
    let ns = Netns::new("nf");
    let mut cases = vec![("empty", Ruleset::default()), ("kitchen-sink", kitchen_sink())];
    let multi = Ruleset {
        forwards: vec![
        fwd("keep", ForwardProto::Tcp, ":5000-5010", "10.0.0.1,10.0.0.2"),
        fwd("mixed", ForwardProto::Both, ":6000-6002", "10.0.0.1,10.0.0.2:7000"),
        fwd("dual", ForwardProto::Udp, ":4000", "10.0.0.1:80,[2001:db8::1]:80"),
        fwd("a", ForwardProto::Tcp, ":8000-8010", "10.0.0.1"),
        fwd("b", ForwardProto::Tcp, ":8005", "10.0.0.2:80"),
        fwd("c", ForwardProto::Tcp, "[2001:db8::9]:8100-8110", "[2001:db8::1]:9100-9110"),
        fwd("d", ForwardProto::Udp, "0.0.0.0:53", "10.0.0.53"),
        fwd("e", ForwardProto::Udp, ":5500-5510", "10.0.0.2:53"),
        fwd("f", ForwardProto::Both, ":8200", "[2001:db8::1]"),
        fwd("g", ForwardProto::Tcp, ":8300-8301", "[2001:db8::2]:9300-9301"),
        ],
        ..Ruleset::default()
    };
    cases.push(("multi", multi));
    for (name, rs) in &cases {
        let doc = emit(rs);
        let live = load(&ns, &doc);
        if std::env::var_os("FWC_NFT_DUMP").is_some() {
            eprintln!("== {name}\n{}", ns.exec(&["nft", "list", "table", "inet", "fwc"]));
        }
        // Every rule we emitted is live (same count per chain), and comments survive.
        for ch in objects(&doc, "chain") {
            let c = ch["name"].as_str().unwrap();
            let want = chain_rules(&doc, c).len();
            let got = listed(&live, "rule").iter().filter(|r| r["chain"] == c).count();
            assert_eq!(got, want, "{name}: chain {c}");
        }
        let want: Vec<&Value> = objects(&doc, "rule").iter().map(|r| &r["comment"]).collect();
        let got: Vec<&Value> = listed(&live, "rule").iter().map(|r| &r["comment"]).collect();
        assert_eq!(got, want, "{name}: comments");
        // nft understood every value's type (an untyped value lists as "[invalid type]"), and
        // the listing itself loads again (what a backup of the live table would do).
        let t = text(&live);
        assert!(!t.contains("invalid type"), "{name}: {t}");
        ns.exec(&["nft", "delete", "table", "inet", "fwc"]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("live.json");
        std::fs::write(&path, &t).unwrap();
        let again = ns.try_exec(&["nft", "-j", "-f", path.to_str().unwrap()]);
        assert!(again.status.success(), "{name}: listing does not load back: {}", String::from_utf8_lossy(&again.stderr));
        ns.exec(&["nft", "delete", "table", "inet", "fwc"]);
    }
    // The kitchen sink's map forward elements are listed with their comments and counters.
    let live = load(&ns, &emit(&kitchen_sink()));
    let a4 = listed(&live, "map").into_iter().find(|m| m["name"] == maps::FWD4_ADDR).unwrap();
    let t = text(&a4["elem"]);
    assert!(t.contains(r#""comment":"fwc:forward:web""#) && t.contains(r#""counter":{"packets":0,"bytes":0}"#), "{t}");
}

#[test]
fn privileged_ten_thousand_forwards_load_as_maps() {
    if !privileged("privileged_ten_thousand_forwards_load_as_maps") {
        return;
    }
    let ns = Netns::new("nf");
    let doc = emit(&many_forwards(10_000));
    let started = std::time::Instant::now();
    let live = load(&ns, &doc);
    eprintln!("10,000 forwards: check+load+list in {:?}", started.elapsed());
    let rules = listed(&live, "rule").len();
    assert_eq!(rules, objects(&emit(&many_forwards(1)), "rule").len(), "rule count must not grow with forwards");
    // Exact ports live in hash maps (an interval map with a concatenated key is slow to fill).
    for m in listed(&live, "map").iter().filter(|m| m["name"] == maps::FWD4_ADDR || m["name"] == maps::FWD6_ADDR) {
        assert!(m.get("flags").is_none_or(|f| !text(f).contains("interval")), "{}", m["name"]);
    }
    let elems: usize = listed(&live, "map")
        .iter()
        .filter(|m| m["name"] == maps::FWD4_ADDR || m["name"] == maps::FWD6_ADDR)
        .map(|m| m["elem"].as_array().map_or(0, Vec::len))
        .sum();
    assert_eq!(elems, 10_000);
}

/// Wait until `ns` listens on tcp `port`.
fn wait_listen(ns: &Netns, port: u16) {
    for _ in 0..100 {
        let out = ns.try_exec(&["ss", "-Htln", &format!("sport = :{port}")]);
        if !String::from_utf8_lossy(&out.stdout).trim().is_empty() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("nothing listens on {port} in {}", ns.name);
}

/// Connect from `ns` to addr:port with socat and return what the server answered.
fn fetch(ns: &Netns, addr: &str, port: u16) -> Option<String> {
    let target = if addr.contains(':') { format!("TCP6:[{addr}]:{port},connect-timeout=2") } else { format!("TCP4:{addr}:{port},connect-timeout=2") };
    let out = ns.try_exec(&["timeout", "5", "socat", "-T", "2", "-u", &target, "STDOUT"]);
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[test]
fn privileged_dnat_map_forward_carries_traffic() {
    if !privileged("privileged_dnat_map_forward_carries_traffic") || !fwc_testkit::which("socat") {
        return;
    }
    let mut topo = Topology::new();
    // Backends answer with their name; the backend has no route to the client, so an answer
    // proves masquerade, and a drop policy on forward proves `ct status dnat accept`.
    for (port, reply) in [(80u16, "backend-80"), (9001, "backend-9001"), (5001, "backend-5001")] {
        let cmd = format!("TCP6-LISTEN:{port},reuseaddr,fork,ipv6only=0");
        let sys = format!("SYSTEM:echo {reply}");
        topo.backend.spawn(&["socat", &cmd, &sys]);
        wait_listen(&topo.backend, port);
    }
    // A deny that does not match the client: forwards pass it, then fwc's accept.
    // (A `to=<backend net>` deny would stop the forwards too: in `forward` the destination
    // is the target. Direct traffic is stopped by the drop policy instead.)
    let mut blocked = rule(ChainKind::Forward, Action::Deny, "blocked");
    blocked.from = addrs("198.51.100.0/24,2001:db8:99::/64");
    // A backend that holds each connection open for a while, for max-conns.
    topo.backend.spawn(&["socat", "TCP-LISTEN:9100,reuseaddr,fork", "SYSTEM:echo held; sleep 3"]);
    wait_listen(&topo.backend, 9100);
    let mut one_conn = fwd("one-conn", ForwardProto::Tcp, ":8090", "198.18.2.2:9100");
    one_conn.max_conns = Some(sp(1));
    let mut limited = fwd("limited", ForwardProto::Tcp, ":8081", "198.18.2.2:80");
    limited.from = addrs("198.51.100.0/24"); // not the client: must not forward
    let rs = Ruleset {
        chains: vec![chain(ChainKind::Input, Policy::Drop, vec![]), chain(ChainKind::Forward, Policy::Drop, vec![blocked])],
        forwards: vec![
            fwd("web", ForwardProto::Tcp, ":8080", "198.18.2.2:80"),
            fwd("web6", ForwardProto::Tcp, ":8080", "[2001:db8:2::2]:80"),
            fwd("range", ForwardProto::Tcp, ":9000-9002", "198.18.2.2:9000-9002"),
            fwd("shift", ForwardProto::Tcp, ":7000-7002", "198.18.2.2:5000-5002"),
            fwd("lb", ForwardProto::Tcp, ":6000", "198.18.2.2:80,198.18.2.2:9001"),
            limited,
            one_conn,
        ],
        ..Ruleset::default()
    };
    let doc = emit(&rs);
    load(&topo.host, &doc);

    assert_eq!(fetch(&topo.client, "198.18.1.1", 8080).as_deref(), Some("backend-80"), "v4 map forward");
    assert_eq!(fetch(&topo.client, "2001:db8:1::1", 8080).as_deref(), Some("backend-80"), "v6 map forward");
    assert_eq!(fetch(&topo.client, "198.18.1.1", 9001).as_deref(), Some("backend-9001"), "keep-port range");
    assert_eq!(fetch(&topo.client, "198.18.1.1", 7001).as_deref(), Some("backend-5001"), "offset range");
    let lb: Vec<Option<String>> = (0..2).map(|_| fetch(&topo.client, "198.18.1.1", 6000)).collect();
    assert!(lb.contains(&Some("backend-80".into())) && lb.contains(&Some("backend-9001".into())), "round robin: {lb:?}");
    assert_eq!(fetch(&topo.client, "198.18.1.1", 8081), None, "from= must restrict the forward");
    // Direct traffic to the backend network is still dropped by the policy.
    assert_eq!(fetch(&topo.client, "198.18.2.2", 80), None);
    // Locally originated connections are forwarded too (nat output).
    assert_eq!(fetch(&topo.host, "198.18.1.1", 8080).as_deref(), Some("backend-80"), "local client");

    // max-conns=1: while one connection is open, the next is refused (tcp reset).
    topo.client.spawn(&["socat", "-u", "TCP4:198.18.1.1:8090", "OPEN:/dev/null"]);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let started = std::time::Instant::now();
    assert_eq!(fetch(&topo.client, "198.18.1.1", 8090), None, "second connection must be refused");
    assert!(started.elapsed() < std::time::Duration::from_millis(1500), "refused with a reset, not timed out");
    std::thread::sleep(std::time::Duration::from_millis(3500));
    assert_eq!(fetch(&topo.client, "198.18.1.1", 8090).as_deref(), Some("held"), "a slot is free again");

    // Per-forward counters: map element counters count the new connections.
    let live: Value = serde_json::from_str(&topo.host.exec(&["nft", "-j", "list", "map", "inet", "fwc", maps::FWD4_ADDR])).unwrap();
    let web = listed(&live, "map")[0]["elem"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e[0]["elem"]["comment"] == "fwc:forward:web")
        .map(|e| e[0]["elem"]["counter"]["packets"].as_u64().unwrap())
        .unwrap();
    assert!(web >= 2, "web forward: {web} new connections counted, expected at least 2");
    // Range forwards count in the interval map's elements.
    let live: Value = serde_json::from_str(&topo.host.exec(&["nft", "-j", "list", "map", "inet", "fwc", maps::FWD4R_ADDR])).unwrap();
    let shift = listed(&live, "map")[0]["elem"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e[0]["elem"]["comment"] == "fwc:forward:shift")
        .map(|e| e[0]["elem"]["counter"]["packets"].as_u64().unwrap())
        .unwrap();
    assert!(shift >= 1, "shift forward: {shift} new connections counted, expected at least 1");
}

#[test]
fn privileged_qos_marks_flows() {
    if !privileged("privileged_qos_marks_flows") || !fwc_testkit::which("socat") {
        return;
    }
    use fwc_compiler::artifacts::QOS_MARK_MASK;
    let mut topo = Topology::new();
    topo.backend.spawn(&["socat", "TCP-LISTEN:80,reuseaddr,fork", "SYSTEM:echo hi"]);
    wait_listen(&topo.backend, 80);
    let mut capped = fwd("capped", ForwardProto::Tcp, ":8080", "198.18.2.2:80");
    capped.up = Some(sp(Bandwidth(1_000_000)));
    capped.down = Some(sp(Bandwidth(2_000_000)));
    let rs = Ruleset { forwards: vec![capped], ..Ruleset::default() };
    let host = implicit_host();
    let plan = plan_host(&rs, &host);
    let doc = nft::emit(&plan);
    load(&topo.host, &doc);
    // Another tool's mark bits must survive: set a bit outside the mask on every packet.
    topo.host.sh("nft add table inet other; nft add chain inet other pre '{ type filter hook prerouting priority -300; }'; nft add rule inet other pre meta mark set meta mark or 0x1");
    let up = plan.qos_classes.iter().find(|c| c.id % 2 == 0).unwrap();
    // After qos_apply (postrouting -150): count packets that carry both the foreign bit and a class.
    topo.host.sh("nft add chain inet other post '{ type filter hook postrouting priority 0; }'");
    for mark in [up.mark, up.mark + (1 << 16)] {
        topo.host.sh(&format!(
            "nft add rule inet other post meta mark and {:#x} == {:#x} counter",
            QOS_MARK_MASK | 1,
            mark | 1
        ));
    }
    assert_eq!(fetch(&topo.client, "198.18.1.1", 8080).as_deref(), Some("hi"));
    let other: Value = serde_json::from_str(&topo.host.exec(&["nft", "-j", "list", "chain", "inet", "other", "post"])).unwrap();
    for r in listed(&other, "rule") {
        let packets = r["expr"].as_array().unwrap().iter().find_map(|s| s["counter"]["packets"].as_u64()).unwrap();
        assert!(packets > 0, "no packet with class and foreign bit: {r}");
    }
    // Both class chains counted packets: original direction (up) and replies (down).
    for id in [up.id, up.id + 1] {
        let live: Value = serde_json::from_str(&topo.host.exec(&["nft", "-j", "list", "chain", "inet", "fwc", &format!("qos_c{id}")])).unwrap();
        let r = listed(&live, "rule")[0];
        let packets = r["expr"].as_array().unwrap().iter().find_map(|s| s["counter"]["packets"].as_u64()).unwrap();
        assert!(packets > 0, "class {id} saw no packets");
    }
    // The conntrack entry carries the up class in the mask bits only.
    let ct = topo.host.try_exec(&["conntrack", "-L", "-p", "tcp", "--dport", "8080"]);
    if ct.status.success() {
        let text = String::from_utf8_lossy(&ct.stdout).to_string();
        let mark = text.split_whitespace().find_map(|w| w.strip_prefix("mark=")).map(|m| m.parse::<u32>().unwrap());
        assert_eq!(mark.map(|m| m & QOS_MARK_MASK), Some(up.mark), "{text}");
    }
}

// ---------------------------------------------------------------------------------------------
// End to end: the docs/design.md example through the real parser

const DESIGN_EXAMPLE: &str = r#"
fwc 1

host "edge-1" {
    labels role=edge region=eu
    vars wan=eth0 lan=eth1
}

set "office" "203.0.113.0/24" "2001:db8:1::/48"
set "blocklist" {
    - "198.51.100.0/24"
    - "192.0.2.66"
}

input policy=drop {
    allow "ssh" proto=tcp port=22 from="@office"
    allow "web" proto=tcp port="80,443"
    allow "ping" proto=icmp
    deny "blocked" from="@blocklist" log=#true
    reject "ident" proto=tcp port=113
    allow "dns" proto=udp port=53 rate="50/second"
}

forward "web" listen=":8080" to="10.0.0.5:80"
forward "game" proto=udp listen=":27015-27020" to="10.0.0.6"
forward "api" listen=":443" to="api.internal:8443" proxy-protocol=2 max-conns=1000
forward "tenant-b" listen=":9000" to="10.0.0.7:9000" bandwidth="100mbit"
forward "lb" listen=":7000" to="10.0.0.8:7000,10.0.0.9:7000" on="role=edge"

shape "guests" from="10.2.0.0/16" rate="20mbit" burst="256KiB" dev=eth1
"#;

fn compile_design_example() -> Value {
    let tree = fwc_compiler::read::source::SourceTree::from_files([("fwc.kdl".to_string(), DESIGN_EXAMPLE.to_string())]);
    let (artifacts, _warnings) = fwc_compiler::compile(&tree, Some("edge-1"), None).unwrap_or_else(|e| panic!("{e:?}"));
    artifacts.nftables.into_value()
}

#[test]
fn design_example_compiles() {
    let doc = compile_design_example();
    for c in ["fwc:filter:ssh", "fwc:filter:blocked", "fwc:forward:api", "fwc:forward:lb", "fwc:forward:tenant-b", "fwc:shape:guests"] {
        assert!(!rules_with_comment(&doc, c).is_empty(), "no rule for {c}");
    }
    let a4 = text(&named(&doc, "map", maps::FWD4_ADDR)["elem"]);
    assert!(a4.contains("fwc:forward:web") && a4.contains("fwc:forward:tenant-b"), "{a4}");
    assert!(text(&named(&doc, "map", maps::FWD4_KEEP)["elem"]).contains("fwc:forward:game"));
}

#[test]
fn privileged_design_example_loads() {
    if !privileged("privileged_design_example_loads") {
        return;
    }
    let ns = Netns::new("nf");
    load(&ns, &compile_design_example());
}

// ---------------------------------------------------------------------------------------------
// Privileged: shapes, output with a drop policy, local clients, per-family maps

/// Packets and bytes counted by the class chain `qos_c<id>` (every packet charged to the class).
fn class_counter(ns: &Netns, id: u32) -> (u64, u64) {
    let live: Value = serde_json::from_str(&ns.exec(&["nft", "-j", "list", "chain", "inet", "fwc", &format!("qos_c{id}")])).unwrap();
    let r = listed(&live, "rule")[0];
    let c = r["expr"].as_array().unwrap().iter().find_map(|s| s.get("counter").cloned()).unwrap();
    (c["packets"].as_u64().unwrap(), c["bytes"].as_u64().unwrap())
}

#[test]
fn privileged_shapes_mark_by_dev_direction_and_specificity() {
    if !privileged("privileged_shapes_mark_by_dev_direction_and_specificity") || !fwc_testkit::which("socat") {
        return;
    }
    let mut topo = Topology::new();
    // Plain routing between client and backend (no NAT): the backend routes back via the host.
    topo.backend.exec(&["ip", "route", "add", "198.18.1.0/24", "via", "198.18.2.1"]);
    topo.backend.spawn(&["socat", "TCP-LISTEN:80,reuseaddr,fork", "SYSTEM:echo hi"]);
    topo.backend.spawn(&["socat", "TCP-LISTEN:81,reuseaddr,fork", "SYSTEM:head -c 200000 /dev/zero"]);
    topo.backend.spawn(&["socat", "TCP-LISTEN:82,reuseaddr,fork", "SYSTEM:echo hi"]);
    for p in [80, 81, 82] {
        wait_listen(&topo.backend, p);
    }
    let (hc, hb) = (topo.host_if_client.as_str(), topo.host_if_backend.as_str());
    // "a-all" sorts first by name but is the least specific: it must not shadow "web". (TCP
    // only, so background IPv6 neighbour discovery leaving hb does not count in this test.)
    let mut all = shaped("a-all", &[hb], Direction::Egress);
    all.proto = Some(sp(Proto::Tcp));
    let mut web = shaped("web", &[hb], Direction::Egress);
    web.proto = Some(sp(Proto::Tcp));
    web.ports = Some(sp(ports("80")));
    let mut inc = shaped("in-client", &[hc], Direction::Ingress);
    inc.proto = Some(sp(Proto::Tcp));
    inc.ports = Some(sp(ports("81")));
    let mut never = shaped("never", &[hc], Direction::Egress);
    never.proto = Some(sp(Proto::Tcp));
    never.ports = Some(sp(ports("9999")));
    let rs = Ruleset { shapes: vec![all, web, inc, never], ..Ruleset::default() };
    let host = implicit_host();
    let plan = plan_host(&rs, &host);
    load(&topo.host, &nft::emit(&plan));
    let id = |name: &str| plan.qos_classes.iter().find(|c| c.rule == name).unwrap().id;

    // tcp/80: the requests leave through hb and go to "web" (most specific), the replies leave
    // through hc, where no egress shape on hb may charge them.
    assert_eq!(fetch(&topo.client, "198.18.2.2", 80).as_deref(), Some("hi"));
    assert!(class_counter(&topo.host, id("web")).0 > 0, "web saw no packets");
    assert_eq!(class_counter(&topo.host, id("a-all")), (0, 0), "catch-all shadowed a specific shape or charged another dev");

    // tcp/81: a 200 kB download. The ingress shape on hc charges what arrives on hc (the
    // client's handshake and ACKs), not the download that leaves through hc.
    assert_eq!(fetch(&topo.client, "198.18.2.2", 81).map(|s| s.len()), Some(200_000));
    let (pk, bytes) = class_counter(&topo.host, id("in-client"));
    assert!(pk > 0 && bytes < 50_000, "ingress shape charged {pk} packets / {bytes} bytes: only the client's side may count");
    assert_eq!(class_counter(&topo.host, id("a-all")), (0, 0), "more specific in-client comes first");

    // tcp/82: only the catch-all matches (requests leaving through hb).
    assert_eq!(fetch(&topo.client, "198.18.2.2", 82).as_deref(), Some("hi"));
    assert!(class_counter(&topo.host, id("a-all")).0 > 0, "a-all saw no packets");
    assert_eq!(class_counter(&topo.host, id("never")), (0, 0));
}

#[test]
fn privileged_output_drop_policy_lets_fwc_traffic_out() {
    if !privileged("privileged_output_drop_policy_lets_fwc_traffic_out") || !fwc_testkit::which("socat") {
        return;
    }
    let mut topo = Topology::new();
    topo.backend.spawn(&["socat", "TCP6-LISTEN:80,reuseaddr,fork,ipv6only=0", "SYSTEM:echo backend-80"]);
    for port in [9200u16, 9201, 9300] {
        let listen = format!("TCP6-LISTEN:{port},reuseaddr,fork,ipv6only=0");
        let reply = format!("SYSTEM:echo up-{port}");
        topo.backend.spawn(&["socat", &listen, &reply]);
    }
    for port in [80, 9200, 9201, 9300] {
        wait_listen(&topo.backend, port);
    }
    let mut rate_fwd = fwd("rate", ForwardProto::Tcp, ":8070", "198.18.2.2:80");
    rate_fwd.conn_rate = rate(3, TimeUnit::Minute, None);
    let mut legacy = fwd("legacy", ForwardProto::Tcp, ":2222", "198.18.2.2:9200,[2001:db8:2::2]:9200");
    legacy.backend = sp(BackendChoice::Userspace);
    let mut api = fwd("api", ForwardProto::Tcp, ":2223", "backend.test:9300");
    api.backend = sp(BackendChoice::Userspace); // a DNS target alone would be a kernel forward
    let rs = Ruleset {
        chains: vec![chain(ChainKind::Output, Policy::Drop, vec![])],
        forwards: vec![fwd("web", ForwardProto::Tcp, ":8080", "198.18.2.2:80"), rate_fwd, legacy, api],
        ..Ruleset::default()
    };
    load(&topo.host, &emit(&rs));

    // A client on the host itself reaches a kernel forward (nat output DNATs, output lets it out).
    assert_eq!(fetch(&topo.host, "198.18.1.1", 8080).as_deref(), Some("backend-80"), "local client through a kernel forward");
    // The forwarder's connections to its IP targets get out, IPv6 too (neighbour discovery);
    // anything else stays dropped.
    assert_eq!(fetch(&topo.host, "198.18.2.2", 9200).as_deref(), Some("up-9200"), "v4 target of a userspace forward");
    assert_eq!(fetch(&topo.host, "2001:db8:2::2", 9200).as_deref(), Some("up-9200"), "v6 target: needs ND in output");
    assert_eq!(fetch(&topo.host, "198.18.2.2", 9201), None, "not a target: the drop policy applies");
    // DNS targets: only sockets carrying FORWARDER_SOCKET_MARK (SO_MARK = 36 on SOL_SOCKET = 1).
    assert_eq!(fetch(&topo.host, "198.18.2.2", 9300), None, "unmarked socket to a non-target");
    // (socat applies `setsockopt-listen` before connect; `setsockopt-int` only after it.)
    let hex: String = nft::FORWARDER_SOCKET_MARK.to_le_bytes().iter().map(|b| format!("{b:02x}")).collect();
    let marked = format!("TCP4:198.18.2.2:9300,connect-timeout=2,setsockopt-listen=1:36:x{hex}");
    let out = topo.host.try_exec(&["timeout", "5", "socat", "-T", "2", "-u", &marked, "STDOUT"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "up-9300", "a socket with the forwarder's mark gets out");

    // conn-rate without burst: burst = count, as in the userspace forwarder (nft's default is 5).
    let got: Vec<bool> = (0..4).map(|_| fetch(&topo.client, "198.18.1.1", 8070).is_some()).collect();
    assert_eq!(got, [true, true, true, false], "3/minute: three connections, then the limit");
}

#[test]
fn privileged_max_conns_counts_local_and_remote_clients_together() {
    if !privileged("privileged_max_conns_counts_local_and_remote_clients_together") || !fwc_testkit::which("socat") {
        return;
    }
    let mut topo = Topology::new();
    topo.backend.spawn(&["socat", "TCP-LISTEN:9100,reuseaddr,fork", "SYSTEM:echo held; sleep 3"]);
    wait_listen(&topo.backend, 9100);
    let mut one = fwd("one-conn", ForwardProto::Tcp, ":8090", "198.18.2.2:9100");
    one.max_conns = Some(sp(1));
    load(&topo.host, &emit(&Ruleset { forwards: vec![one], ..Ruleset::default() }));
    // A remote client holds the only slot: a client on the host is refused (tcp reset) ...
    topo.client.spawn(&["socat", "-u", "TCP4:198.18.1.1:8090", "OPEN:/dev/null"]);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let started = std::time::Instant::now();
    assert_eq!(fetch(&topo.host, "198.18.1.1", 8090), None, "local client must count against max-conns");
    assert!(started.elapsed() < std::time::Duration::from_millis(1500), "refused with a reset, not timed out");
    // ... and once the slot is free, a local connection holds it against remote clients.
    std::thread::sleep(std::time::Duration::from_millis(3500));
    topo.host.spawn(&["socat", "-u", "TCP4:198.18.1.1:8090", "OPEN:/dev/null"]);
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(fetch(&topo.client, "198.18.1.1", 8090), None, "the local connection holds the slot");
}

#[test]
fn privileged_v4_maps_do_not_see_ipv6() {
    if !privileged("privileged_v4_maps_do_not_see_ipv6") || !fwc_testkit::which("socat") {
        return;
    }
    let mut topo = Topology::new();
    topo.backend.spawn(&["socat", "TCP-LISTEN:80,reuseaddr,fork", "SYSTEM:echo backend-80"]);
    wait_listen(&topo.backend, 80);
    load(&topo.host, &emit(&Ruleset { forwards: vec![fwd("web4", ForwardProto::Tcp, ":8080", "198.18.2.2:80")], ..Ruleset::default() }));
    let count = || {
        let live: Value = serde_json::from_str(&topo.host.exec(&["nft", "-j", "list", "map", "inet", "fwc", maps::FWD4_ADDR])).unwrap();
        listed(&live, "map")[0]["elem"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e[0]["elem"]["comment"] == "fwc:forward:web4")
            .map(|e| e[0]["elem"]["counter"]["packets"].as_u64().unwrap())
            .unwrap()
    };
    // An IPv6 connection to the same port: no IPv6 target, so nothing answers, and the v4
    // map must not have looked at it.
    assert_eq!(fetch(&topo.client, "2001:db8:1::1", 8080), None);
    assert_eq!(count(), 0, "IPv6 packets counted by the IPv4 map element");
    assert_eq!(fetch(&topo.client, "198.18.1.1", 8080).as_deref(), Some("backend-80"));
    assert_eq!(count(), 1);
}

#[test]
fn dynamic_sets_are_declared_empty_with_timeout_and_size() {
    let mut banned = addr_set("banned", &[]);
    banned.dynamic = Some(DynamicSet { timeout_s: Some(3600), size: Some(65536) });
    let mut deny = rule(ChainKind::Input, Action::Deny, "banned");
    deny.from = addrs("@banned");
    let doc = emit(&Ruleset { sets: vec![banned], chains: vec![chain(ChainKind::Input, Policy::Accept, vec![deny])], ..Ruleset::default() });
    for (name, ty) in [("banned_v4", "ipv4_addr"), ("banned_v6", "ipv6_addr")] {
        assert_eq!(
            named(&doc, "set", name),
            &json!({"family": "inet", "table": "fwc", "name": name, "type": ty, "flags": ["interval", "timeout"], "timeout": 3600, "size": 65536})
        );
    }
    // Empty at compile time, either family at run time: the rule matches both halves.
    let rules = rules_with_comment(&doc, "fwc:filter:banned");
    assert_eq!(rules.len(), 2);
    assert!(has_stmt(rules[0], m(payload("ip", "saddr"), json!("@banned_v4"))));
    assert!(has_stmt(rules[1], m(payload("ip6", "saddr"), json!("@banned_v6"))));
}
