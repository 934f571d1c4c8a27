//! The evaluator against the edge-host example: every kind of path and decision.

use std::path::Path;

use super::*;
use crate::read::source::SourceTree;

fn edge() -> (Evaluator, BTreeMap<String, Location>) {
    let tree = SourceTree::from_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/edge-host")).unwrap();
    let view = crate::load_host(&tree, Some("edge-1")).unwrap();
    let a = crate::emit_view(&view, None);
    (Evaluator::new(&a).unwrap(), rule_locations(&view))
}

fn x(ev: &Evaluator, flow: &str) -> Explanation {
    ev.explain(&Flow::parse(flow).unwrap()).unwrap()
}

#[test]
fn filter_verdicts_and_deciding_rules() {
    let (ev, locs) = edge();
    let e = x(&ev, "tcp 203.0.113.5:40000 -> 198.18.1.1:22");
    assert_eq!((e.verdict, e.decided_by.identity.as_deref()), (Verdict::Accept, Some("fwc:filter:ssh")));
    let l = &locs["fwc:filter:ssh"];
    assert_eq!((l.file.as_str(), l.line, l.column), ("rules/10-filter.kdl", 3, 5));
    let e = x(&ev, "tcp 198.51.100.9 -> 198.18.1.1:22");
    assert_eq!((e.verdict, e.decided_by.identity.as_deref()), (Verdict::Drop, Some("fwc:filter:blocked")));
    let e = x(&ev, "tcp 192.0.2.1 -> 198.18.1.1:22");
    assert_eq!((e.verdict, e.decided_by.identity.as_deref(), e.decided_by.what.as_str()), (Verdict::Drop, None, "policy drop of chain input"));
    let e = x(&ev, "tcp -> :113");
    assert_eq!((e.verdict, e.decided_by.identity.as_deref()), (Verdict::Reject, Some("fwc:filter:ident")));
    // IPv6: the office's v6 prefix reaches ssh, the v4 set does not apply.
    let e = x(&ev, "tcp [2001:db8:1::7]:40000 -> [2001:db8::1]:22");
    assert_eq!(e.decided_by.identity.as_deref(), Some("fwc:filter:ssh"));
    // Interface-bound rule: only via eth0.
    assert_eq!(x(&ev, "tcp 198.18.9.10 -> :9100").verdict, Verdict::Drop);
    assert_eq!(x(&ev, "tcp 198.18.9.11 -> :9100 in eth0").decided_by.identity.as_deref(), Some("fwc:filter:node-exporter"));
    // Rate-limited ping: the first packet passes.
    let e = x(&ev, "icmp -> 198.18.1.1");
    assert_eq!(e.decided_by.identity.as_deref(), Some("fwc:filter:ping"));
    assert!(e.steps.iter().flat_map(|s| &s.hits).any(|h| h.notes.iter().any(|n| n.contains("rate limit"))));
}

#[test]
fn kernel_forwards_dnat_and_qos() {
    let (ev, _) = edge();
    let e = x(&ev, "tcp 203.0.113.5:40000 -> 198.18.1.1:8080");
    assert_eq!(e.path, Origin::Forward);
    assert_eq!(e.dnat, Some(("10.0.0.5".parse().unwrap(), 80)));
    assert_eq!(e.dnat_rule.as_deref(), Some("fwc:forward:web"));
    assert_eq!(e.verdict, Verdict::Accept);
    assert!(e.masquerade);
    assert!(e.qos.is_empty());
    // Port range kept: udp 27017 -> 10.0.0.6:27017.
    let e = x(&ev, "udp -> :27017");
    assert_eq!((e.dnat, e.dnat_rule.as_deref()), (Some(("10.0.0.6".parse().unwrap(), 27017)), Some("fwc:forward:game")));
    // Round robin: the first connection goes to the first target.
    let e = x(&ev, "tcp -> :7000");
    assert_eq!((e.dnat, e.dnat_rule.as_deref()), (Some(("10.0.0.8".parse().unwrap(), 7000)), Some("fwc:forward:lb")));
    // IPv6 forward with a listen address; the same port elsewhere is not forwarded.
    let e = x(&ev, "tcp -> [2001:db8::10]:8443");
    assert_eq!(e.dnat, Some(("2001:db8:2::5".parse().unwrap(), 443)));
    assert_eq!(x(&ev, "tcp -> [2001:db8::11]:8443").dnat, None);
    // Capped forward: both classes.
    let e = x(&ev, "tcp -> :9000");
    let classes: Vec<(&str, QosDirection)> = e.qos.iter().map(|q| (q.rule.as_str(), q.direction)).collect();
    assert_eq!(classes, vec![("tenant-b", QosDirection::Up), ("tenant-b", QosDirection::Down)]);
    // A routed flow not forwarded: forward chain policy, unless lan-out.
    assert_eq!(x(&ev, "tcp 10.2.0.5 -> 192.0.2.80:80 forward").decided_by.what, "policy drop of chain forward");
    let e = x(&ev, "tcp 10.2.0.5 -> 192.0.2.80:80 in eth1 out eth0 forward");
    assert_eq!(e.decided_by.identity.as_deref(), Some("fwc:filter:lan-out"));
    // Shape on the LAN: answers to a guest leave through eth1 and are charged to "guests".
    let e = x(&ev, "tcp 10.2.0.5 -> 192.0.2.80:80 in eth1 out eth0 forward");
    assert_eq!(e.qos.iter().map(|q| q.rule.as_str()).collect::<Vec<_>>(), vec!["guests"]);
}

#[test]
fn userspace_forwarder_and_output() {
    let (ev, _) = edge();
    let e = x(&ev, "tcp -> :443");
    let u = e.userspace.clone().unwrap();
    assert_eq!((u.rule.as_str(), u.targets.clone(), u.allowed), ("api", vec!["api.internal:8443".to_string()], true));
    // `legacy` only admits the office (nftables rule and allow_from agree).
    assert_eq!(x(&ev, "tcp 192.0.2.1 -> :2222").verdict, Verdict::Drop);
    let e = x(&ev, "tcp 203.0.113.9 -> :2222");
    assert_eq!((e.verdict, e.userspace.map(|u| u.rule)), (Verdict::Accept, Some("legacy".to_string())));
    // Output: smtp out of eth0 is denied, elsewhere accepted by policy.
    assert_eq!(x(&ev, "tcp -> 192.0.2.25:25 out eth0 output").decided_by.identity.as_deref(), Some("fwc:filter:no-smtp"));
    assert_eq!(x(&ev, "tcp -> 192.0.2.25:25 out eth1 output").verdict, Verdict::Accept);
}

#[test]
fn unknown_json_is_an_error_not_a_guess() {
    let (_, _) = edge();
    let a = Artifacts {
        nftables: serde_json::json!({"nftables": [
            {"add": {"table": {"family": "inet", "name": "fwc"}}},
            {"add": {"chain": {"family": "inet", "table": "fwc", "name": "input", "type": "filter", "hook": "input", "prio": 0, "policy": "drop"}}},
            {"add": {"rule": {"family": "inet", "table": "fwc", "chain": "input", "expr": [{"match": {"left": {"osf": {"key": "name"}}, "right": "Linux", "op": "=="}}, {"accept": null}]}}}
        ]})
        .into(),
        qos: Default::default(),
        forward: Default::default(),
        manifest: crate::artifacts::Manifest { version: 1, host: "h".into(), commit: None, rules: vec![], artifact_hashes: Default::default(), setup: Default::default(), valid_until: None },
    };
    let ev = Evaluator::new(&a).unwrap();
    let err = ev.explain(&Flow::parse("tcp -> :22").unwrap()).unwrap_err();
    assert!(matches!(&err, EvalError::Unsupported { chain, rule: 0, what } if chain == "input" && what.contains("osf")), "{err}");
}

#[test]
fn rate_guards_do_not_fire_on_the_first_connection() {
    // Found by the kernel cross-check of golden/09: `limit rate over` does not match a first packet.
    let tree = SourceTree::from_files([(
        "fwc.kdl".to_string(),
        "fwc 1\nforward \"throttled\" listen=\":7200\" to=\"10.0.0.12:80\" conn-rate=\"5/second\"\n".to_string(),
    )]);
    let (a, _) = crate::compile(&tree, None, None).unwrap();
    let e = Evaluator::new(&a).unwrap().explain(&Flow::parse("tcp -> :7200").unwrap()).unwrap();
    assert_eq!((e.verdict, e.dnat), (Verdict::Accept, Some(("10.0.0.12".parse().unwrap(), 80))));
}

#[test]
fn round_robin_dnat_of_one_family_leaves_the_other_alone() {
    // Found by the kernel property test: the round-robin rule has no family match, so an
    // IPv6 packet meets `dnat ip to …`, which the kernel's inet NAT ignores.
    let tree = SourceTree::from_files([(
        "fwc.kdl".to_string(),
        "fwc 1\nforward \"lb\" listen=\":9010\" to=\"10.9.0.4:9010,10.9.0.5:9010\"\n".to_string(),
    )]);
    let (a, _) = crate::compile(&tree, None, None).unwrap();
    let ev = Evaluator::new(&a).unwrap();
    let e = ev.explain(&Flow::parse("tcp [2001:db8::9]:1 -> [2001:db8::1]:9010").unwrap()).unwrap();
    assert_eq!((e.verdict, e.dnat), (Verdict::Accept, None));
    // IPv4: the first connection gets the first target; all targets are reported.
    let e = ev.explain(&Flow::parse("tcp -> :9010").unwrap()).unwrap();
    assert_eq!(e.dnat, Some(("10.9.0.4".parse().unwrap(), 9010)));
    assert_eq!(e.dnat_round_robin, vec![("10.9.0.4".parse().unwrap(), 9010), ("10.9.0.5".parse().unwrap(), 9010)]);
}

#[test]
fn health_checked_kernel_forward_lists_every_target_of_its_dispatch() {
    // Found by the kernel cross-check of golden/27: the dispatch chain's numgen vmap reaches a
    // target chain per slot; the kernel may pick any of them, so all are reported.
    let tree = SourceTree::from_files([(
        "fwc.kdl".to_string(),
        "fwc 1\nforward \"web\" listen=\":8080\" to=\"10.0.0.8:80,10.0.0.9:8080\" health-check=\"tcp\"\n".to_string(),
    )]);
    let (a, _) = crate::compile(&tree, None, None).unwrap();
    let e = Evaluator::new(&a).unwrap().explain(&Flow::parse("tcp -> :8080").unwrap()).unwrap();
    assert_eq!((e.verdict, e.dnat), (Verdict::Accept, Some(("10.0.0.8".parse().unwrap(), 80))));
    assert_eq!(e.dnat_round_robin, vec![("10.0.0.8".parse().unwrap(), 80), ("10.0.0.9".parse().unwrap(), 8080)]);
}

#[test]
fn a_dns_named_kernel_forward_is_followed_to_its_name() {
    let tree = SourceTree::from_files([(
        "fwc.kdl".to_string(),
        "fwc 1\nforward \"api\" listen=\":8443\" to=\"api.internal\"\n".to_string(),
    )]);
    let view = crate::load_host(&tree, None).unwrap();
    let ev = Evaluator::new(&crate::emit_view(&view, None)).unwrap();
    let e = x(&ev, "tcp 198.51.100.9 -> 198.18.1.1:8443");
    assert_eq!(e.verdict, Verdict::Accept);
    assert_eq!(e.dnat, None, "no address is known before the forwarder resolves the name");
    assert_eq!(e.dnat_name.as_deref(), Some("api.internal:8443"));
    assert_eq!(e.dnat_rule.as_deref(), Some("fwc:forward:api"));
    assert_eq!(e.path, Origin::Forward);
    assert!(e.masquerade);
}

/// Per-source limits: the evaluator passes the source's element through the
/// fail-closed lookup (it was just added), accepts, and says which limits apply — for a filter
/// rule, a kernel forward and a userspace forward; a source the rule does not take gets no note.
#[test]
fn per_source_limits_are_assumed_and_said() {
    let tree = SourceTree::from_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../golden/40-per-source")).unwrap();
    let view = crate::load_host(&tree, None).unwrap();
    let ev = Evaluator::new(&crate::emit_view(&view, None)).unwrap();
    let e = x(&ev, "tcp 198.18.5.5:40000 -> 198.18.1.1:22");
    assert_eq!((e.verdict, e.decided_by.identity.as_deref()), (Verdict::Accept, Some("fwc:filter:ssh")));
    assert_eq!(e.limits.len(), 2, "{:?}", e.limits);
    assert!(e.limits[0].contains("at most 5/minute new connections (burst 50) per source, over it dropped"), "{:?}", e.limits);
    assert!(e.limits[1].contains("at most 30 concurrent connections per source, over it rejected"), "{:?}", e.limits);
    let e = x(&ev, "tcp [2001:db8:5::9]:40000 -> [2001:db8::1]:993");
    assert_eq!(e.decided_by.identity.as_deref(), Some("fwc:filter:imap"));
    assert!(e.limits[0].contains("grouped by mask ffff:ffff:ffff:ff00::"), "{:?}", e.limits);
    let e = x(&ev, "tcp 198.18.5.5:40000 -> 198.18.1.1:8080");
    assert_eq!((e.verdict, e.dnat_rule.as_deref()), (Verdict::Accept, Some("fwc:forward:web")));
    assert!(e.limits.iter().any(|l| l.starts_with("fwc:forward:web: per-source limit: at most 20/second")), "{:?}", e.limits);
    let e = x(&ev, "tcp 198.18.5.5:40000 -> 198.18.1.1:8443");
    assert!(e.limits.iter().any(|l| l.contains("per-source limit (userspace forwarder)") && l.contains("100 sources")), "{:?}", e.limits);
    let text = render::text(&e, "localhost", &BTreeMap::new());
    assert!(text.contains("limit:   fwc:forward:app: per-source limit"), "{text}");
    let e = x(&ev, "udp 192.0.2.7:40000 -> 198.18.1.1:53");
    assert!(e.limits.is_empty() && e.verdict == Verdict::Drop, "{e:?}");
}

/// A live plan on a host whose original firewall is still loaded: the flow effects are
/// computed with its tables on both sides, so flows it already decides do not "change".
#[test]
fn flow_effects_beside_the_hosts_other_tables() {
    let tree = SourceTree::from_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/edge-host")).unwrap();
    let alone = effects::against_applied(None, &tree, Some("edge-1")).unwrap().unwrap();
    assert!(alone.effects.iter().any(|e| e.effect == "closes"), "{alone:?}");
    // An original that drops everything on every filter hook: whatever fwc adds, the host
    // drops the same flows before and after.
    let mut objs = vec![];
    for fam in ["ip", "ip6"] {
        objs.push(serde_json::json!({"table": {"family": fam, "name": "orig", "handle": 1}}));
        for (i, hook) in ["input", "forward", "output"].into_iter().enumerate() {
            objs.push(serde_json::json!({"chain": {"family": fam, "table": "orig", "name": hook, "handle": i + 2, "type": "filter", "hook": hook, "prio": 0, "policy": "drop"}}));
        }
    }
    let foreign = serde_json::json!({ "nftables": objs });
    let beside = effects::against_applied_beside(None, &tree, Some("edge-1"), jiff::Timestamp::UNIX_EPOCH, &foreign).unwrap().unwrap();
    assert!(beside.effects.iter().all(|e| e.effect != "closes" && e.effect != "opens"), "{:#?}", beside.effects);
    // Expectations naming fwc's own deciding rule (`by=`) may now pass; none fails.
    assert!(beside.expectations.iter().all(|x| x.after), "{:#?}", beside.expectations);
}
