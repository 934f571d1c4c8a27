//! Unit tests of the nftables emitter's helpers (the whole output is covered by golden/).

use super::expr::*;
use super::family::*;
use super::*;

fn net(s: &str) -> AddrElem {
    AddrElem::Net(s.parse().unwrap())
}

#[test]
fn comments_round_trip() {
    let c = rule_comment(RuleKind::Forward, "web");
    assert_eq!(c, "fwc:forward:web");
    assert_eq!(parse_rule_comment(&c), Some((RuleKind::Forward, "web")));
    assert_eq!(parse_rule_comment("fwc:shape:a:b"), Some((RuleKind::Shape, "a:b")));
    assert_eq!(parse_rule_comment("docker"), None);
    assert!(rule_comment(RuleKind::Filter, &"x".repeat(300)).len() <= MAX_COMMENT);
}

#[test]
fn addresses_merge_and_render() {
    let [v4, v6] = set_elems(&[
        net("10.0.0.0/8"),
        net("10.1.0.0/16"),
        net("192.0.2.7/32"),
        AddrElem::Range("192.0.2.8".parse().unwrap(), "192.0.2.20".parse().unwrap()),
        net("2001:db8::/32"),
        net("0.0.0.0/0"),
    ]);
    // 0.0.0.0/0 swallows everything else.
    assert_eq!(serde_json::to_value(&v4).unwrap(), json!([{"prefix": {"addr": "0.0.0.0", "len": 0}}]));
    assert_eq!(serde_json::to_value(&v6).unwrap(), json!([{"prefix": {"addr": "2001:db8::", "len": 32}}]));
    let [v4, _] = set_elems(&[
        net("192.0.2.7/32"),
        AddrElem::Range("192.0.2.8".parse().unwrap(), "192.0.2.20".parse().unwrap()),
        net("198.51.100.0/24"),
        net("198.51.101.0/24"),
    ]);
    assert_eq!(
        serde_json::to_value(&v4).unwrap(),
        json!([{"range": ["192.0.2.7", "192.0.2.20"]}, {"prefix": {"addr": "198.51.100.0", "len": 23}}])
    );
    let [_, v6] = set_elems(&[net("::/0")]);
    assert_eq!(serde_json::to_value(&v6).unwrap(), json!([{"prefix": {"addr": "::", "len": 0}}]));
    let [v4, _] = set_elems(&[net("203.0.113.9/32")]);
    assert_eq!(serde_json::to_value(&v4).unwrap(), json!(["203.0.113.9"]));
}

#[test]
fn ports_merge() {
    let p = |lo, hi| PortRange { lo, hi };
    assert_eq!(merged_ports(&[p(80, 80), p(443, 443), p(81, 90), p(85, 100)]), vec![p(80, 100), p(443, 443)]);
    assert_eq!(serde_json::to_value(ports_expr(&[p(22, 22)]).unwrap()).unwrap(), json!(22));
    assert_eq!(serde_json::to_value(ports_expr(&[p(22, 22), p(80, 90)]).unwrap()).unwrap(), json!({"set": [22, {"range": [80, 90]}]}));
}

#[test]
fn target_ports() {
    let r = |lo, hi| PortRange { lo, hi };
    assert_eq!(TPort::of(r(80, 80), None), TPort::Fixed(80));
    assert_eq!(TPort::of(r(80, 80), Some(r(8080, 8080))), TPort::Fixed(8080));
    assert_eq!(TPort::of(r(100, 110), None), TPort::Keep);
    assert_eq!(TPort::of(r(100, 110), Some(r(100, 110))), TPort::Keep);
    assert_eq!(TPort::of(r(100, 110), Some(r(9000, 9000))), TPort::Fixed(9000));
    let off = TPort::of(r(100, 110), Some(r(2100, 2110)));
    assert_eq!(off.port(100), 2100);
    assert_eq!(off.port(105), 2105);
    // A shorter target range clamps.
    assert_eq!(TPort::of(r(100, 110), Some(r(2100, 2102))).port(110), 2102);
}

#[test]
fn l4_forms() {
    let v = |x: Vec<S>| serde_json::to_value(x).unwrap();
    assert_eq!(v(l4_match(None, None, None)), json!([]));
    assert_eq!(
        v(l4_match(Some(Proto::Tcp), Some(&[PortRange::single(22)]), None)),
        json!([{"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 22}}])
    );
    assert_eq!(
        v(l4_match(None, Some(&[PortRange::single(53)]), None))[0],
        json!({"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": {"set": ["tcp", "udp"]}}})
    );
    assert_eq!(
        v(l4_match(Some(Proto::Icmpv6), Some(&[PortRange::single(53)]), None)),
        json!([{"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": "ipv6-icmp"}}])
    );
}

#[test]
fn written_text_is_serde_jsons_pretty_print() {
    let mut out = Out::default();
    out.add(NfListObject::Table(Table { family: NfFamily::INet, name: NFT_TABLE.into(), handle: None }));
    let [v4, v6] = merged(&[
        net("192.0.2.7/32"),
        AddrElem::Range("192.0.2.8".parse().unwrap(), "192.0.2.20".parse().unwrap()),
        net("198.51.100.0/24"),
        net("2001:db8::/32"),
    ]);
    out.named_addr_set("s_v4".into(), Fam::V4, v4.iter().copied());
    out.named_addr_set("s_v6".into(), Fam::V6, v6.iter().copied());
    out.named_addr_set("e_v4".into(), Fam::V4, std::iter::empty());
    out.chain("input", None);
    out.rule("input", vec![], Some("fwc:filter:x".into()));
    let doc = out.finish();
    let set = |name: &str, t: &str, elem: Option<Value>| {
        let mut v = json!({"family": "inet", "table": "fwc", "name": name, "type": t, "flags": ["interval"]});
        if let Some(e) = elem {
            v["elem"] = e;
        }
        json!({"add": {"set": v}})
    };
    let expected = json!({"nftables": [
        {"add": {"table": {"family": "inet", "name": "fwc"}}},
        set("s_v4", "ipv4_addr", Some(json!([{"range": ["192.0.2.7", "192.0.2.20"]}, {"prefix": {"addr": "198.51.100.0", "len": 24}}]))),
        set("s_v6", "ipv6_addr", Some(json!([{"prefix": {"addr": "2001:db8::", "len": 32}}]))),
        set("e_v4", "ipv4_addr", None),
        {"add": {"chain": {"family": "inet", "table": "fwc", "name": "input"}}},
        {"add": {"rule": {"family": "inet", "table": "fwc", "chain": "input", "expr": [], "comment": "fwc:filter:x"}}},
    ]});
    assert_eq!(doc.text(), fwc_artifacts::nfttext::render(&expected));
    assert_eq!(Out::default().finish().text(), "{\"nftables\":[]}\n");
}

/// Rules written before the last object follow every object (in their order); after
/// `start_rules` they go straight into the document. Kept whole or streamed into a writer in
/// blocks (hashed on the way), the text is the same bytes, and the digest is the text's.
#[test]
fn objects_then_rules_kept_whole_or_streamed() {
    let table = || NfListObject::Table(Table { family: NfFamily::INet, name: NFT_TABLE.into(), handle: None });
    let table_json = json!({"add": {"table": {"family": "inet", "name": "fwc"}}});
    let chain = |n: &str| json!({"add": {"chain": {"family": "inet", "table": "fwc", "name": n}}});
    let rule = |c: &str| json!({"add": {"rule": {"family": "inet", "table": "fwc", "chain": c, "expr": []}}});
    // (early rules, objects, late rules); the late ones enough to be passed on in many blocks.
    let many: Vec<String> = (0..4000).map(|i| format!("c{i}")).collect();
    let cases: [(&[&str], bool, Vec<&str>); 4] = [
        (&["a", "b"], false, vec![]),
        (&[], true, vec![]),
        (&["a"], true, vec!["b"]),
        (&[], true, many.iter().map(String::as_str).collect()),
    ];
    for (early, objects, late) in cases {
        let fill = |out: &mut Out| {
            for c in early {
                out.rule(c, vec![], None);
            }
            if objects {
                out.add(table());
                out.chain("a", None);
            }
            out.start_rules();
            for c in &late {
                out.rule(c, vec![], None);
            }
        };
        let mut want = Vec::new();
        if objects {
            want.extend([table_json.clone(), chain("a")]);
        }
        want.extend(early.iter().chain(&late).map(|c| rule(c)));
        let want = fwc_artifacts::nfttext::render(&json!({ "nftables": want }));
        let mut whole = Out::default();
        fill(&mut whole);
        assert_eq!(whole.finish().text(), want);
        let mut file = Vec::new();
        let mut streamed = Out::streaming(&mut file);
        fill(&mut streamed);
        let done = streamed.finish_streamed().unwrap();
        assert_eq!(String::from_utf8(file).unwrap(), want);
        assert_eq!(done, Streamed { sha256: fwc_artifacts::sha256_hex(want.as_bytes()), bytes: want.len() as u64 });
    }
}

/// An object after the first rule would be unloadable (`nft` reads the file in order): the
/// emitter declares every object first, and says so loudly if it did not.
#[test]
#[should_panic(expected = "every nft object is declared before the rules")]
fn an_object_after_the_rules_started_is_a_bug() {
    let mut out = Out::default();
    out.start_rules();
    out.chain("late", None);
}
