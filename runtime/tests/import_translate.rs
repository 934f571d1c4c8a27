//! The pure part of `fwc import` as table tests: nftables JSON in, fwc rules out (what is
//! merged, refused, left out as Docker's), and the rendered repository passes `fwc check`
//! and the generated policy tests (no root: listings are written by hand, as nft prints them).

use fwc_runtime::import::{self, render, translate};
use serde_json::{json, Value};

fn rule(family: &str, table: &str, chain: &str, handle: u64, expr: Value) -> Value {
    json!({"rule": {"family": family, "table": table, "chain": chain, "handle": handle, "expr": expr}})
}

fn base(family: &str, table: &str, name: &str, hook: &str, policy: &str) -> Value {
    json!({"chain": {"family": family, "table": table, "name": name, "handle": 1, "type": "filter", "hook": hook, "prio": 0, "policy": policy}})
}

fn m(left: Value, right: Value) -> Value {
    json!({"match": {"op": "==", "left": left, "right": right}})
}

fn tcp_dport(p: Value) -> Value {
    m(json!({"payload": {"protocol": "tcp", "field": "dport"}}), p)
}

fn listing(objs: Vec<Value>) -> Value {
    json!({ "nftables": objs })
}

/// Render, write to a temp repo, and run check + the generated tests through the library.
fn check_repo(files: &[(String, String)]) {
    let dir = tempfile::tempdir().unwrap();
    import::write(dir.path(), files).unwrap();
    let tree = fwc_compiler::read::source::SourceTree::from_dir(dir.path()).unwrap();
    if let Err(d) = fwc_compiler::check_fleet(&tree) {
        panic!("{}\n{}", d.render(false), files.iter().map(|(p, t)| format!("== {p}\n{t}")).collect::<String>());
    }
    let report = fwc_compiler::policytest::run(&tree).unwrap_or_else(|_| panic!("policy tests do not run"));
    assert_eq!(report.failed(), 0, "{}", serde_json::to_string_pretty(&report).unwrap());
}

#[test]
fn iptables_and_ip6tables_tables_become_one_block_with_family_limits() {
    let l = listing(vec![
        json!({"table": {"family": "ip", "name": "filter", "handle": 1}}),
        base("ip", "filter", "INPUT", "input", "drop"),
        rule("ip", "filter", "INPUT", 2, json!([tcp_dport(json!(22)), {"accept": null}])),
        json!({"table": {"family": "ip6", "name": "filter", "handle": 2}}),
        base("ip6", "filter", "INPUT", "input", "accept"),
    ]);
    let imp = translate::translate(&l, &Default::default());
    assert!(imp.refused.is_empty(), "{:?}", imp.refused);
    let input = &imp.chains[0];
    assert_eq!(input.policy, "drop");
    let text = render::files(&imp, "test").into_iter().find(|(p, _)| p.ends_with("input.kdl")).unwrap().1;
    assert!(text.contains(r#"allow "ssh" proto=tcp port=22 from="0.0.0.0/0""#), "{text}");
    assert!(text.contains(r#"allow "ipv6-input-accept" from="::/0""#), "{text}");
    let out = import::import(l, &Default::default(), "test", false, &mut |_| {}).unwrap();
    check_repo(&out.files);
}

#[test]
fn jumps_are_inlined_logs_merged_and_negations_refused() {
    let l = listing(vec![
        json!({"table": {"family": "inet", "name": "filter", "handle": 1}}),
        base("inet", "filter", "input", "input", "drop"),
        json!({"chain": {"family": "inet", "table": "filter", "name": "admin", "handle": 2}}),
        rule("inet", "filter", "input", 3, json!([m(json!({"ct": {"key": "state"}}), json!(["established", "related"])), {"accept": null}])),
        rule("inet", "filter", "input", 4, json!([m(json!({"payload": {"protocol": "ip", "field": "saddr"}}), json!({"prefix": {"addr": "192.0.2.0", "len": 24}})), {"jump": {"target": "admin"}}])),
        rule("inet", "filter", "admin", 5, json!([tcp_dport(json!(22)), {"log": {"prefix": "ssh "}}])),
        rule("inet", "filter", "admin", 6, json!([tcp_dport(json!(22)), {"accept": null}])),
        rule("inet", "filter", "input", 7, json!([{"match": {"op": "!=", "left": {"meta": {"key": "iifname"}}, "right": "eth0"}}, {"drop": null}])),
        rule("inet", "filter", "input", 8, json!([{"match": {"op": "!=", "left": {"ct": {"key": "state"}}, "right": "new"}}, {"drop": null}])),
    ]);
    let imp = translate::translate(&l, &Default::default());
    let r = &imp.chains[0].rules;
    assert_eq!(r.len(), 2, "{r:?}");
    assert_eq!(r[0].name, "from-192.0.2.0-24-ssh");
    assert!(r[0].log && r[0].log_prefix.as_deref() == Some("ssh "));
    // A negated interface is fwc's `in="!eth0"`; a negated ct state has no fwc form.
    assert_eq!((r[1].name.as_str(), r[1].cond.iif.as_deref(), r[1].cond.not.iif), ("deny-not-in-eth0", Some("eth0"), true));
    assert_eq!(imp.merged.len(), 2, "{:?}", imp.merged); // established/related + the log rule
    assert_eq!(imp.refused.len(), 1);
    assert!(imp.refused[0].origin.contains("handle 8") && imp.refused[0].what.contains("!="), "{:?}", imp.refused);
    // Without --partial the refusal stops the import; with it, the rest is written.
    assert!(matches!(import::import(l.clone(), &Default::default(), "t", false, &mut |_| {}), Err(import::ImportError::Refused(v)) if v.len() == 1));
    assert!(import::import(l, &Default::default(), "t", true, &mut |_| {}).is_ok());
}

#[test]
fn docker_chains_are_left_out_and_docker_user_is_imported() {
    let l = listing(vec![
        json!({"table": {"family": "ip", "name": "filter", "handle": 1}}),
        base("ip", "filter", "FORWARD", "forward", "drop"),
        json!({"chain": {"family": "ip", "table": "filter", "name": "DOCKER-USER", "handle": 2}}),
        json!({"chain": {"family": "ip", "table": "filter", "name": "DOCKER", "handle": 3}}),
        rule("ip", "filter", "FORWARD", 4, json!([{"jump": {"target": "DOCKER-USER"}}])),
        rule("ip", "filter", "FORWARD", 5, json!([m(json!({"meta": {"key": "oifname"}}), json!("docker0")), {"jump": {"target": "DOCKER"}}])),
        rule("ip", "filter", "FORWARD", 6, json!([{"match": {"op": "!=", "left": {"meta": {"key": "oifname"}}, "right": "docker0"}}, m(json!({"meta": {"key": "iifname"}}), json!("docker0")), {"accept": null}])),
        rule("ip", "filter", "DOCKER-USER", 7, json!([tcp_dport(json!(5432)), {"drop": null}])),
        rule("ip", "filter", "DOCKER-USER", 8, json!([{"return": null}])),
        rule("ip", "filter", "DOCKER", 9, json!([tcp_dport(json!(80)), {"accept": null}])),
    ]);
    let imp = translate::translate(&l, &Default::default());
    assert!(imp.refused.is_empty(), "{:?}", imp.refused);
    assert!(imp.containers);
    let fwd = imp.chains.iter().find(|c| c.kind == "forward").unwrap();
    assert_eq!(fwd.rules.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["deny-postgres", "ipv6-forward-accept"]);
    assert!(imp.notes.iter().any(|n| n.contains("Docker")), "{:?}", imp.notes);
    let out = import::import(l, &Default::default(), "t", false, &mut |_| {}).unwrap();
    check_repo(&out.files);
}

#[test]
fn dnat_becomes_a_forward_and_large_sets_go_to_lists() {
    let elems: Vec<Value> = (0..40).map(|i| json!(format!("198.51.100.{i}"))).collect();
    let l = listing(vec![
        json!({"table": {"family": "inet", "name": "filter", "handle": 1}}),
        json!({"set": {"family": "inet", "table": "filter", "name": "bad", "type": "ipv4_addr", "handle": 2, "elem": elems}}),
        base("inet", "filter", "input", "input", "accept"),
        rule("inet", "filter", "input", 3, json!([m(json!({"payload": {"protocol": "ip", "field": "saddr"}}), json!("@bad")), {"drop": null}])),
        json!({"table": {"family": "ip", "name": "nat", "handle": 3}}),
        json!({"chain": {"family": "ip", "table": "nat", "name": "pre", "handle": 1, "type": "nat", "hook": "prerouting", "prio": -100, "policy": "accept"}}),
        rule("ip", "nat", "pre", 4, json!([tcp_dport(json!(8080)), {"dnat": {"addr": "198.18.2.2", "port": 80}}])),
    ]);
    let mut origins = translate::Origins::new();
    origins.insert(("ip".into(), "nat".into(), "pre".into(), 0), "nftables.conf:9".into());
    let out = import::import(l, &origins, "t", false, &mut |_| {}).unwrap();
    let root = &out.files.iter().find(|(p, _)| p == "fwc.kdl").unwrap().1;
    assert!(root.contains(r#"set "bad" file="lists/bad.txt""#), "{root}");
    assert!(root.contains(r#"forward "fwd-tcp-8080" listen=":8080" to="198.18.2.2:80" comment="nftables.conf:9""#), "{root}");
    assert!(out.files.iter().any(|(p, t)| p == "lists/bad.txt" && t.lines().filter(|l| !l.starts_with('#')).count() == 40));
    check_repo(&out.files);
}

#[test]
fn nft_file_lines_map_to_rules() {
    let text = "table inet filter {\n  set s { type ipv4_addr; elements = { 192.0.2.1 } }\n  chain input {\n    type filter hook input priority 0; policy drop;\n    tcp dport 22 accept # ssh\n\n    tcp dport {\n      80, 443\n    } accept\n  }\n}\n";
    let l = listing(vec![
        rule("inet", "filter", "input", 5, json!([])),
        rule("inet", "filter", "input", 6, json!([])),
    ]);
    let o = import::source::nft_origins(text, "nftables.conf", &l);
    assert_eq!(o.get(&("inet".into(), "filter".into(), "input".into(), 0)).map(String::as_str), Some("nftables.conf:5"));
    assert_eq!(o.get(&("inet".into(), "filter".into(), "input".into(), 1)).map(String::as_str), Some("nftables.conf:7"));
    let ipt = import::source::iptables_origins("*filter\n:INPUT DROP [0:0]\n-A INPUT -p tcp --dport 22 -j ACCEPT\nCOMMIT\n*nat\n-A INPUT -j ACCEPT\n", "rules.v4", "ip");
    assert_eq!(ipt.get(&("ip".into(), "filter".into(), "INPUT".into(), 0)).map(String::as_str), Some("rules.v4:3"));
    assert_eq!(ipt.get(&("ip".into(), "nat".into(), "INPUT".into(), 0)).map(String::as_str), Some("rules.v4:6"));
}

#[test]
fn verify_names_both_deciding_rules_of_a_difference() {
    // The original DNATs :8080 but its forward chain (policy drop) never accepts the DNATed
    // connections, so they die; fwc's forward is accepted after the user's rules. --verify
    // must catch exactly that.
    let l = listing(vec![
        json!({"table": {"family": "inet", "name": "filter", "handle": 1}}),
        base("inet", "filter", "forward", "forward", "drop"),
        json!({"table": {"family": "ip", "name": "nat", "handle": 2}}),
        json!({"chain": {"family": "ip", "table": "nat", "name": "pre", "handle": 1, "type": "nat", "hook": "prerouting", "prio": -100, "policy": "accept"}}),
        rule("ip", "nat", "pre", 4, json!([tcp_dport(json!(8080)), {"dnat": {"addr": "198.18.2.2", "port": 80}}])),
    ]);
    let out = import::import(l, &Default::default(), "t", false, &mut |_| {}).unwrap();
    let dir = tempfile::tempdir().unwrap();
    import::write(dir.path(), &out.files).unwrap();
    let tree = fwc_compiler::read::source::SourceTree::from_dir(dir.path()).unwrap();
    let (art, _) = fwc_compiler::compile(&tree, None, None).unwrap();
    let diffs = import::verify(&out.listing, &art, &out.flows).unwrap();
    assert!(!diffs.is_empty());
    let d = diffs.iter().find(|d| d.flow.contains(":8080")).expect("the forwarded flow differs");
    assert!(d.original.starts_with("drop") && d.original.contains("policy drop of chain inet filter forward"), "{d:?}");
    assert!(d.imported.starts_with("accept") && d.imported.contains("dnat to 198.18.2.2:80"), "{d:?}");
    // And the generated tests hold the import to the original: they fail on the same flow.
    let report = fwc_compiler::policytest::run(&tree).unwrap_or_else(|_| panic!("tests run"));
    assert!(report.failed() >= 1);
}

#[test]
fn ufw_limit_becomes_a_rate_per_source_on_the_accept_with_a_note() {
    let text = "-A ufw-user-input -p tcp --dport 22 -m conntrack --ctstate NEW -m recent --set\n\
-A ufw-user-input -p tcp --dport 22 -m conntrack --ctstate NEW -m recent --update --seconds 30 --hitcount 6 -j ufw-user-limit\n\
-A ufw-user-input -p tcp --dport 22 -j ufw-user-limit-accept\n";
    let mut notes = Vec::new();
    let out = import::source::ufw_limits(text, "user.rules", &mut notes);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "line numbers are kept: {out}");
    assert!(lines[0].starts_with('#') && lines[1].starts_with('#'));
    // ufw counts each source apart (`-m recent`): a rate per source address, never one rate
    // shared by all clients (one attacker would throttle everyone's logins).
    assert_eq!(lines[2], "-A ufw-user-input -p tcp --dport 22 -m hashlimit --hashlimit-upto 12/minute --hashlimit-burst 6 --hashlimit-mode srcip --hashlimit-name ufw-limit-3 -j ufw-user-limit-accept");
    assert!(notes[0].contains("rate-per-source=\"12/minute burst 6\""), "{notes:?}");
    assert!(notes[0].starts_with("user.rules:3: ufw `limit` (6 new connections in 30 s per source address"), "{notes:?}");
}

/// firewalld's XML (tests/import/firewalld over the system definitions in
/// tests/import/firewalld-lib) as fwc rules: each with the file:line of its element, named
/// after what it does, in firewalld's order (log, deny, allow, then the zone's target).
#[test]
fn firewalld_zones_services_rich_rules_and_ipsets() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/import");
    let (mut cfg, notes) = import::firewalld_source::read_config(&dir.join("firewalld"), &dir.join("firewalld-lib")).unwrap();
    assert!(notes.is_empty(), "{notes:?}");
    // The public server of the real test, plus a zone bound to a network and an interface.
    let internal = std::fs::read_to_string(dir.join("firewalld-internal.xml")).unwrap();
    cfg.files.insert("zones/internal.xml".into(), ("zones/internal.xml".into(), internal));
    let imp = import::firewalld::translate(&cfg);
    assert!(imp.notes.iter().any(|n| n.starts_with("zones/public.xml:13: firewalld applies this forward-port only to packets of zone public, not to those of internal")), "{:?}", imp.notes);
    assert!(imp.refused.is_empty(), "{:?}", imp.refused);
    let files = render::files(&imp, "firewalld");
    let file = |name: &str| files.iter().find(|(p, _)| p.ends_with(name)).unwrap_or_else(|| panic!("no {name} in {files:?}")).1.clone();
    let input: String = files.iter().filter(|(p, _)| p.contains("-input")).map(|(_, t)| t.as_str()).collect();
    let paths: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
    // The prerouting block: firewalld's IPv6 reverse-path filter (IPv6_rpfilter=yes).
    assert_eq!(paths, ["fwc.kdl", "rules/10-input-internal-from-10.9.0.0-16.kdl", "rules/20-input-internal-fwc-t-mgmt.kdl", "rules/30-input-public.kdl", "rules/40-forward.kdl", "rules/50-output.kdl", "rules/60-prerouting.kdl"]);
    assert!(file("60-prerouting.kdl").contains(r#"deny "ipv6-rpfilter" from="::/0" rpfilter="strict" comment="firewalld.conf IPv6_rpfilter=yes""#), "{files:?}");
    for line in [
        r#"log "log-from-198.18.1.20-tcp-2222" proto=tcp port=2222 from="198.18.1.20" log-prefix="SSH2 " log-rate="3/minute" comment="zones/public.xml:19""#,
        r#"reject "block-echo-request" proto=icmp icmp-type="echo-request" reject-with="admin-prohibited" comment="zones/public.xml:11""#,
        r#"reject "block-echo-request-v6" proto=icmpv6 icmp-type="echo-request" reject-with="admin-prohibited" comment="zones/public.xml:11""#,
        r#"reject "reject-tcp-23" proto=tcp port=23 comment="zones/public.xml:27""#,
        r#"reject "reject-tcp-113" proto=tcp port=113 reject-with="port-unreachable" comment="zones/public.xml:31""#,
        r#"deny "deny-from-blocklist" from="@blocklist" comment="zones/public.xml:35""#,
        r#"allow "ssh" proto=tcp port=22 comment="zones/public.xml:5""#,
        r#"allow "myapp-tcp" proto=tcp port=7000 comment="zones/public.xml:8""#,
        r#"allow "myapp-udp" proto=udp port=7001 comment="zones/public.xml:8""#,
        r#"allow "tcp-8000-8009" proto=tcp port="8000-8009" comment="zones/public.xml:9""#,
        r#"allow "from-198.18.1.9-mysql" proto=tcp port=3306 from="198.18.1.9" comment="zones/public.xml:14""#,
        r#"allow "from-2001-db8-1-64-tcp-9000" proto=tcp port=9000 from="2001:db8:1::/64" rate="10/second" comment="zones/public.xml:39""#,
        r#"allow "public-icmp" proto=icmp comment="zones/public.xml:2""#,
        // The internal zone (target ACCEPT) by its source, then by its interface, before the default zone.
        r#"allow "internal-from-10.9.0.0-16-accept" from="10.9.0.0/16" comment="zones/internal.xml:2""#,
        r#"allow "internal-in-fwc-t-mgmt-accept" in="fwc-t-mgmt" comment="zones/internal.xml:2""#,
    ] {
        assert!(input.contains(line), "missing\n{line}\nin\n{input}");
    }
    assert!(file("30-input-public.kdl").starts_with("// The input chain: zone public, the default zone (zones/public.xml:2), imported.\ninput policy=reject reject-with=\"admin-prohibited\" {\n"), "{input}");
    assert!(file("20-input-internal-fwc-t-mgmt.kdl").starts_with("// The input chain: zone internal, packets in by fwc-t-mgmt (zones/internal.xml:2), imported.\ninput {\n"), "{input}");
    let pos = |s: &str| input.find(s).unwrap_or_else(|| panic!("{s}"));
    assert!(pos("internal-from-10.9") < pos("internal-in-fwc-t-mgmt") && pos("internal-in-fwc-t-mgmt-accept") < pos("\"ssh\""));
    assert!(pos("log \"log-from") < pos("block-echo-request") && pos("deny-from-blocklist") < pos("\"ssh\""));
    let root = file("fwc.kdl");
    for line in [
        r#"forward "fwd-tcp-8080" listen=":8080" to="198.18.2.2:80" comment="zones/public.xml:13""#,
        r#"masquerade "masquerade-public" from="0.0.0.0/0" comment="zones/public.xml:12""#,
        "set \"blocklist\" {\n    - \"192.0.2.0/24\"\n    - \"198.18.9.9\"\n    - \"198.18.1.30\"\n}",
    ] {
        assert!(root.contains(line), "missing\n{line}\nin\n{root}");
    }
    assert!(file("40-forward.kdl").contains(r#"reject "rfc3964-forward" to="::/96,"#));
    check_repo(&files);
}

/// What fwc cannot say is refused by file:line (protocols other than
/// tcp/udp/icmp, audit, a local port redirect, an unknown service); --partial writes the rest.
#[test]
fn firewalld_constructs_without_an_fwc_form_are_refused_by_line() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::create_dir_all(d.join("zones")).unwrap();
    std::fs::write(d.join("firewalld.conf"), "DefaultZone=edge\nIPv6_rpfilter=no\n").unwrap();
    std::fs::write(
        d.join("zones/edge.xml"),
        r#"<?xml version="1.0" encoding="utf-8"?>
<zone target="DROP">
  <icmp-block-inversion/>
  <protocol value="gre"/>
  <service name="no-such-service"/>
  <forward-port port="80" protocol="tcp" to-port="8080"/>
  <rule family="ipv4"><source address="192.0.2.1"/><audit/><accept/></rule>
  <rule family="ipv4"><source address="192.0.2.2" invert="true"/><drop/></rule>
  <port protocol="tcp" port="22"/>
</zone>
"#,
    )
    .unwrap();
    let lib = tmp.path().join("nolib");
    let (cfg, notes) = import::firewalld_source::read_config(d, &lib).unwrap();
    assert_eq!(notes.len(), 1, "no system definitions: said so {notes:?}");
    let imp = import::firewalld::translate(&cfg);
    let at: Vec<&str> = imp.refused.iter().map(|r| r.origin.as_str()).collect();
    assert_eq!(at, ["zones/edge.xml:4", "zones/edge.xml:5", "zones/edge.xml:6", "zones/edge.xml:7", "zones/edge.xml:8"], "{:?}", imp.refused);
    assert_eq!(imp.chains[0].policy, "drop");
    assert_eq!(imp.chains[0].rules.len(), 1);
    let e = import::finish(imp.clone(), None, &Default::default(), "t", false, &mut |_| {}).unwrap_err();
    assert!(matches!(e, import::ImportError::Refused(ref r) if r.len() == 5), "{e}");
    let out = import::finish(imp, None, &Default::default(), "t", true, &mut |_| {}).unwrap();
    assert!(out.proof_missing.is_some() && !out.files.iter().any(|(p, _)| p.contains("imported.kdl")));
    check_repo(&out.files);
}

/// Rich rule forms, services with includes, helpers and destinations, and policies of each
/// direction, as a table: (XML of zone `z` or a policy, the rendered rules that must appear).
#[test]
fn firewalld_rich_rules_services_and_policies_table() {
    let zone = |body: &str| format!("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<zone>\n{body}\n</zone>\n");
    let service = |body: &str| format!("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<service>\n{body}\n</service>\n");
    let cases: &[(&str, &[(&str, String)], &[&str])] = &[
        (
            "reject types and a log without prefix",
            &[("zones/z.xml", zone("<rule family=\"ipv4\"><source address=\"192.0.2.0/24\"/><reject type=\"icmp-host-prohibited\"/></rule>\n<rule><port port=\"25\" protocol=\"tcp\"/><log/><drop/></rule>"))],
            &[
                r#"reject "reject-from-192.0.2.0-24" from="192.0.2.0/24" reject-with="admin-prohibited" comment="zones/z.xml:3""#,
                r#"log "log-tcp-25" proto=tcp port=25 comment="zones/z.xml:4""#,
                r#"deny "deny-tcp-25" proto=tcp port=25 comment="zones/z.xml:4""#,
            ],
        ),
        (
            "a service with an include, a destination and a helper; a service over udp and tcp",
            &[
                ("zones/z.xml", zone("<service name=\"ftp2\"/>\n<service name=\"dns2\"/>")),
                ("services/ftp2.xml", service("<port protocol=\"tcp\" port=\"21\"/><helper name=\"ftp\"/><include service=\"web2\"/><destination ipv4=\"198.18.0.10\"/>")),
                ("services/web2.xml", service("<port protocol=\"tcp\" port=\"8021\"/>")),
                ("services/dns2.xml", service("<port protocol=\"tcp\" port=\"53\"/><port protocol=\"udp\" port=\"53\"/>")),
            ],
            &[r#"allow "ftp2" proto=tcp port=21 to="198.18.0.10" comment="zones/z.xml:3""#, r#"allow "web2" proto=tcp port=8021 comment="zones/z.xml:3""#, r#"allow "dns2" proto=both port=53 comment="zones/z.xml:4""#],
        ),
        (
            "masquerade and a forward-port of a source, in rich rules",
            &[("zones/z.xml", zone("<rule family=\"ipv4\"><source address=\"10.1.0.0/16\"/><masquerade/></rule>\n<rule family=\"ipv4\"><source address=\"198.18.3.0/24\"/><forward-port port=\"2222\" protocol=\"tcp\" to-port=\"22\" to-addr=\"10.1.0.5\"/></rule>"))],
            &[
                r#"masquerade "masquerade-z" from="10.1.0.0/16" comment="zones/z.xml:3""#,
                r#"forward "fwd-tcp-2222" listen=":2222" to="10.1.0.5:22" from="198.18.3.0/24" comment="zones/z.xml:4""#,
            ],
        ),
        (
            "a source given with host bits is the network firewalld and the kernel match",
            &[("zones/z.xml", zone("<rule family=\"ipv4\"><source address=\"149.126.4.94/23\"/><port port=\"22\" protocol=\"tcp\"/><accept/></rule>"))],
            &[r#"from="149.126.4.0/23" comment="zones/z.xml:3""#],
        ),
        (
            "a zone bound to an IPv4 source: a service with an IPv6 destination never matches there",
            &[
                ("zones/z.xml", zone("<port protocol=\"tcp\" port=\"22\"/>")),
                ("zones/home.xml", zone("<source address=\"192.168.1.0/24\"/>\n<service name=\"dhcp6c\"/>\n<port protocol=\"tcp\" port=\"53\"/>")),
                ("services/dhcp6c.xml", service("<port protocol=\"udp\" port=\"546\"/><destination ipv6=\"fe80::/64\"/>")),
            ],
            &[r#"allow "home-tcp-53" proto=tcp port=53 from="192.168.1.0/24" comment="zones/home.xml:5""#],
        ),
        (
            "a zone bound to a source with <forward/> forwards to that source (firewalld's `ip daddr SOURCE accept`)",
            &[
                ("zones/z.xml", zone("<port protocol=\"tcp\" port=\"22\"/>")),
                ("zones/home.xml", zone("<source address=\"192.168.1.0/24\"/>\n<forward/>")),
            ],
            &[r#"allow "home-forward-to-192.168.1.0-24" from="192.168.1.0/24" to="192.168.1.0/24" comment="zones/home.xml:2""#],
        ),
        (
            "a policy to a zone nothing binds is not active (Docker binds docker0 at run time)",
            &[
                ("zones/z.xml", zone("<port protocol=\"tcp\" port=\"22\"/>")),
                ("zones/docker.xml", "<?xml version=\"1.0\"?>\n<zone target=\"ACCEPT\">\n<forward/>\n</zone>\n".into()),
                ("policies/docker-forwarding.xml", "<?xml version=\"1.0\"?>\n<policy target=\"ACCEPT\">\n<ingress-zone name=\"ANY\"/><egress-zone name=\"docker\"/>\n</policy>\n".into()),
            ],
            &["policies/docker-forwarding.xml:2: policy `docker-forwarding` is not active — zone docker has no interface or source"],
        ),
        (
            "policies: ANY to HOST with a target, HOST to ANY, ANY to ANY",
            &[
                ("zones/z.xml", zone("<port protocol=\"tcp\" port=\"22\"/>")),
                ("policies/in.xml", "<?xml version=\"1.0\"?>\n<policy target=\"DROP\" priority=\"10\">\n<ingress-zone name=\"ANY\"/><egress-zone name=\"HOST\"/>\n<port protocol=\"tcp\" port=\"80\"/>\n</policy>\n".into()),
                ("policies/out.xml", "<?xml version=\"1.0\"?>\n<policy target=\"CONTINUE\" priority=\"-5\">\n<ingress-zone name=\"HOST\"/><egress-zone name=\"ANY\"/>\n<rule family=\"ipv4\"><destination address=\"198.18.9.0/24\"/><drop/></rule>\n</policy>\n".into()),
                ("policies/fwd.xml", "<?xml version=\"1.0\"?>\n<policy target=\"ACCEPT\">\n<ingress-zone name=\"ANY\"/><egress-zone name=\"ANY\"/>\n</policy>\n".into()),
            ],
            &[
                "allow \"tcp-22\" proto=tcp port=22 comment=\"zones/z.xml:3\"\n    allow \"tcp-80\" proto=tcp port=80 comment=\"policies/in.xml:4\"\n    deny \"policy-in\" comment=\"policies/in.xml:2\"",
                r#"deny "deny-to-198.18.9.0-24" to="198.18.9.0/24" comment="policies/out.xml:4""#,
                r#"allow "policy-fwd" comment="policies/fwd.xml:2""#,
            ],
        ),
    ];
    for (what, files, want) in cases {
        let mut cfg = import::firewalld::Config { conf: "DefaultZone=z\nIPv6_rpfilter=no\nRFC3964_IPv4=no\n".into(), ..Default::default() };
        for (path, text) in *files {
            cfg.files.insert(path.to_string(), (path.to_string(), text.clone()));
        }
        let imp = import::firewalld::translate(&cfg);
        assert!(imp.refused.is_empty(), "{what}: {:?}", imp.refused);
        let rendered = render::files(&imp, "t");
        let all: String = rendered.iter().map(|(_, t)| t.as_str()).collect();
        for w in *want {
            assert!(all.contains(w), "{what}: missing\n{w}\nin\n{all}");
        }
        if what.starts_with("a service") {
            assert!(imp.notes.iter().any(|n| n.contains("conntrack helper(s) ftp")), "{what}: {:?}", imp.notes);
        }
        check_repo(&rendered);
    }
}

/// firewalld's IPv6 reverse-path filter: `yes`/`strict` and `loose` are fwc's rpfilter deny for
/// IPv6, `no` nothing, and the `-forward` modes (routed packets only) are refused by name.
#[test]
fn firewalld_ipv6_rpfilter_modes() {
    for (mode, want) in [("strict", Some(r#"deny "ipv6-rpfilter" from="::/0" rpfilter="strict""#)), ("loose", Some(r#"rpfilter="loose""#)), ("no", None), ("loose-forward", None)] {
        let mut cfg = import::firewalld::Config { conf: format!("DefaultZone=z\nIPv6_rpfilter={mode}\nRFC3964_IPv4=no\n"), ..Default::default() };
        cfg.files.insert("zones/z.xml".into(), ("zones/z.xml".into(), "<?xml version=\"1.0\"?>\n<zone>\n<port protocol=\"tcp\" port=\"22\"/>\n</zone>\n".to_string()));
        let imp = import::firewalld::translate(&cfg);
        let all: String = render::files(&imp, "t").iter().map(|(_, t)| t.as_str()).collect();
        match want {
            Some(w) => assert!(all.contains(w) && imp.refused.is_empty(), "{mode}: {w} in\n{all}\n{:?}", imp.refused),
            None => assert!(!all.contains("rpfilter=")),
        }
        assert_eq!(imp.refused.iter().any(|r| r.what.contains("routed packets only")), mode == "loose-forward", "{mode}: {:?}", imp.refused);
    }
}

/// A firewalld.conf option the proof's firewalld does not know (firewalld 2.x's ReloadPolicy on
/// an older firewalld) is reported as a version difference, not as a bare "Invalid option".
#[test]
fn an_unknown_firewalld_option_is_a_version_difference() {
    let n = import::firewalld_source::version_difference("ERROR: Invalid option: 'ReloadPolicy=INPUT:DROP'", Some("1.3.3"));
    assert!(n.starts_with("firewalld.conf: `ReloadPolicy=INPUT:DROP` is not an option of this host's firewalld 1.3.3: a setting of another firewalld version"), "{n}");
    assert_eq!(import::firewalld_source::version_difference("WARNING: something", None), "WARNING: something");
}

/// nft's forms of a tcp flags match, each as fwc's `tcp-flags=` (SET[/MASK], `!` negated;
/// the mask fin,syn,rst,ack is the default), and the import passes `fwc check`.
#[test]
fn tcp_flag_forms_become_tcp_flags() {
    let flags = json!({"payload": {"protocol": "tcp", "field": "flags"}});
    let masked = |mask: Value| json!({"&": [flags.clone(), mask]});
    let fsra = json!(["fin", "syn", "rst", "ack"]);
    let six = json!(["fin", "syn", "rst", "psh", "ack", "urg"]);
    let cases: Vec<(Value, &str)> = vec![
        (json!({"match": {"op": "==", "left": masked(fsra.clone()), "right": "syn"}}), "syn"),
        (json!({"match": {"op": "!=", "left": masked(fsra.clone()), "right": "syn"}}), "!syn"),
        (json!({"match": {"op": "==", "left": masked(six.clone()), "right": 0}}), "none/fin,syn,rst,psh,ack,urg"),
        (json!({"match": {"op": "!", "left": flags.clone(), "right": six.clone()}}), "none/fin,syn,rst,psh,ack,urg"),
        (json!({"match": {"op": "==", "left": masked(six.clone()), "right": ["fin", "psh", "urg"]}}), "fin,psh,urg/fin,syn,rst,psh,ack,urg"),
        (json!({"match": {"op": "==", "left": masked(json!({"|": ["syn", "fin"]})), "right": {"|": ["syn", "fin"]}}}), "fin,syn/fin,syn"),
        (json!({"match": {"op": "in", "left": flags.clone(), "right": "syn"}}), "syn/syn"),
        (json!({"match": {"op": "in", "left": flags.clone(), "right": ["syn", "ack"]}}), "!none/syn,ack"),
        (json!({"match": {"op": "==", "left": flags.clone(), "right": 0}}), "none/all"),
    ];
    let mut objs = vec![json!({"table": {"family": "inet", "name": "filter", "handle": 1}}), base("inet", "filter", "input", "input", "accept")];
    for (i, (m, _)) in cases.iter().enumerate() {
        objs.push(rule("inet", "filter", "input", 10 + i as u64, json!([m, {"drop": null}])));
    }
    let l = listing(objs);
    let imp = translate::translate(&l, &Default::default());
    assert!(imp.refused.is_empty(), "{:?}", imp.refused);
    let got: Vec<&str> = imp.chains[0].rules.iter().map(|r| r.cond.tcp_flags.as_deref().unwrap_or_default()).collect();
    assert_eq!(got, cases.iter().map(|(_, w)| *w).collect::<Vec<_>>());
    assert!(imp.chains[0].rules.iter().all(|r| r.cond.proto.as_deref() == Some("tcp")));
    // A mask that leaves out the flags it wants set never matches: refused by name.
    let bad = listing(vec![
        json!({"table": {"family": "inet", "name": "filter", "handle": 1}}),
        base("inet", "filter", "input", "input", "accept"),
        rule("inet", "filter", "input", 2, json!([{"match": {"op": "==", "left": masked(json!(["fin"])), "right": "syn"}}, {"drop": null}])),
    ]);
    let imp = translate::translate(&bad, &Default::default());
    assert!(imp.refused.len() == 1 && imp.refused[0].what.contains("outside its mask"), "{:?}", imp.refused);
    let out = import::import(l, &Default::default(), "test", false, &mut |_| {}).unwrap();
    check_repo(&out.files);
}

/// IP protocols other than tcp/udp/ICMP (`meta l4proto gre`, `ip protocol 47`, iptables
/// `-p esp`) become `proto=<name>` (a number when fwc has no name for it); `ip protocol` keeps
/// its rule IPv4's; AH over IPv6 (an extension header there) is refused by name.
#[test]
fn other_ip_protocols_become_proto_names() {
    let l4 = |p: Value| m(json!({"meta": {"key": "l4proto"}}), p);
    let ipproto = |p: Value| m(json!({"payload": {"protocol": "ip", "field": "protocol"}}), p);
    let l = listing(vec![
        json!({"table": {"family": "inet", "name": "filter", "handle": 1}}),
        base("inet", "filter", "input", "input", "drop"),
        rule("inet", "filter", "input", 2, json!([l4(json!("gre")), {"accept": null}])),
        rule("inet", "filter", "input", 3, json!([ipproto(json!(50)), {"accept": null}])),
        rule("inet", "filter", "input", 4, json!([l4(json!("ipencap")), {"accept": null}])),
        rule("inet", "filter", "input", 5, json!([l4(json!(253)), {"accept": null}])),
        rule("inet", "filter", "input", 6, json!([m(json!({"payload": {"protocol": "ip6", "field": "nexthdr"}}), json!("ah")), {"accept": null}])),
    ]);
    let imp = translate::translate(&l, &Default::default());
    let got: Vec<(Option<&str>, &str)> = imp.chains[0].rules.iter().map(|r| (r.cond.proto.as_deref(), r.name.as_str())).collect();
    assert_eq!(got, [(Some("gre"), "gre"), (Some("esp"), "esp"), (Some("ipip"), "ipip"), (Some("253"), "proto-253")]);
    assert!(imp.refused.len() == 1 && imp.refused[0].what.contains("`ah` over IPv6"), "{:?}", imp.refused);
    let text = render::files(&imp, "test").into_iter().find(|(p, _)| p.ends_with("input.kdl")).unwrap().1;
    assert!(text.contains(r#"allow "esp" proto=esp from="0.0.0.0/0""#) && text.contains("proto=253"), "{text}");
}

/// The imported rules decide every flow of the proof as the original does.
fn verified(out: &import::Import) {
    assert!(out.proof_missing.is_none() && !out.flows.is_empty(), "no proof: {:?}", out.proof_missing);
    let dir = tempfile::tempdir().unwrap();
    import::write(dir.path(), &out.files).unwrap();
    let tree = fwc_compiler::read::source::SourceTree::from_dir(dir.path()).unwrap();
    let (art, _) = fwc_compiler::compile(&tree, None, None).unwrap();
    let diffs = import::verify(&out.listing, &art, &out.flows).unwrap();
    assert!(diffs.is_empty(), "{diffs:?}");
}

/// Shapes of public configurations that were refused although fwc can say them: a DNAT of a
/// port list without a new port (a captive portal's `iif "wlan0" tcp dport { 80, 443 } dnat
/// to A`) is one forward per port; `udp dport 0-65535` is every port, no port match; a
/// prerouting drop on the IPv4 header length (`ip hdrlength != 5`, packets with IP options) is
/// refused by line, and the proof still runs (a flow carries no options). The proof samples
/// the routed flows a DNAT without a destination rewrites.
#[test]
fn dnat_port_lists_full_port_ranges_and_header_lengths() {
    let pre = json!({"chain": {"family": "ip", "table": "nat", "name": "pre", "handle": 1, "type": "nat", "hook": "prerouting", "prio": -100, "policy": "accept"}});
    let iif = m(json!({"meta": {"key": "iif"}}), json!("wlan0"));
    let l = listing(vec![
        json!({"table": {"family": "ip", "name": "nat", "handle": 1}}),
        pre,
        rule("ip", "nat", "pre", 2, json!([iif, tcp_dport(json!({"set": [80, 443]})), {"dnat": {"addr": "198.18.3.3"}}])),
        json!({"table": {"family": "inet", "name": "filter", "handle": 2}}),
        base("inet", "filter", "input", "input", "drop"),
        rule("inet", "filter", "input", 3, json!([m(json!({"payload": {"protocol": "udp", "field": "dport"}}), json!({"range": [0, 65535]})), {"accept": null}])),
    ]);
    let out = import::import(l, &Default::default(), "t", false, &mut |_| {}).unwrap();
    let root = &out.files.iter().find(|(p, _)| p == "fwc.kdl").unwrap().1;
    for want in [r#"forward "fwd-tcp-80" listen=":80" to="198.18.3.3" in="wlan0""#, r#"forward "fwd-tcp-443" listen=":443" to="198.18.3.3" in="wlan0""#] {
        assert!(root.contains(want), "{want} in\n{root}");
    }
    // Without a destination the DNAT also rewrites what is routed through to other hosts on
    // wlan0: the proof samples those flows, so a difference there cannot hide.
    let routed = out.flows.iter().any(|f| f.dport == 443 && f.iif.as_deref() == Some("wlan0") && f.origin == fwc_compiler::eval::flow::Origin::Forward);
    assert!(routed, "no routed flow on wlan0 to port 443 in the proof");
    let input = &out.files.iter().find(|(p, _)| p == "rules/10-input.kdl").unwrap().1;
    assert!(input.contains(r#"allow "udp-0-65535" proto=udp comment="#), "{input}");
    check_repo(&out.files);

    let early = json!({"chain": {"family": "inet", "table": "earlyfilter", "name": "prerouting", "handle": 1, "type": "filter", "hook": "prerouting", "prio": -300, "policy": "accept"}});
    let hdr = json!({"match": {"op": "!=", "left": {"payload": {"protocol": "ip", "field": "hdrlength"}}, "right": 5}});
    let l = listing(vec![json!({"table": {"family": "inet", "name": "earlyfilter", "handle": 1}}), early, rule("inet", "earlyfilter", "prerouting", 2, json!([hdr, {"counter": null}, {"drop": null}]))]);
    let e = import::import(l.clone(), &Default::default(), "t", false, &mut |_| {}).unwrap_err();
    assert!(e.to_string().contains("hdrlength") || matches!(e, import::ImportError::Refused(ref r) if r[0].what.contains("hdrlength")), "{e}");
    let out = import::import(l, &Default::default(), "t", true, &mut |_| {}).unwrap();
    verified(&out);
}
