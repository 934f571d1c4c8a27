//! `fwc import` on the minimal cases of tests/import/cases/ (see its README): what real hosts'
//! configurations do that the import once lost in silence, refused falsely, or crashed on.
//! Each original is loaded by its own tool in a scratch namespace (that is how fwc import
//! reads), so these tests need root; the firewalld cases that need the proof also need
//! firewalld. Every case ends in a faithful import (`--verify`: 0 differ) or an error naming
//! the construct and the original's line, and a failed import writes nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use fwc_testkit::{output_text as text, privileged, Netns};

fn case(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/import/cases").join(name)
}

struct Run {
    code: Option<i32>,
    text: String,
    out: PathBuf,
    _tmp: tempfile::TempDir,
}

fn import(from: &str, name: &str, extra: &[&str]) -> Run {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fw");
    let mut args = vec!["import", "--from", from, case(name).to_str().unwrap().to_string().leak(), "--out", out.to_str().unwrap().to_string().leak(), "--color", "never"];
    args.extend_from_slice(extra);
    let o: Output = Command::new(env!("CARGO_BIN_EXE_fwc")).args(&args).output().unwrap();
    Run { code: o.status.code(), text: text(&o), out, _tmp: tmp }
}

/// The text of the import's `rules/NN-<kind>.kdl`.
fn block(r: &Run, kind: &str) -> String {
    let rules = r.out.join("rules");
    let f = std::fs::read_dir(&rules).unwrap().flatten().map(|e| e.path()).find(|p| p.file_name().unwrap().to_string_lossy().ends_with(&format!("-{kind}.kdl")));
    std::fs::read_to_string(f.unwrap_or_else(|| panic!("no {kind} block in {}", rules.display()))).unwrap()
}

/// Refused without --partial (exit 1, each `needle` in the message, nothing written).
fn refused(r: &Run, needles: &[&str]) {
    assert_eq!(r.code, Some(1), "{}", r.text);
    for n in needles {
        assert!(r.text.contains(n), "`{n}` not in:\n{}", r.text);
    }
    assert!(!r.out.exists(), "a failed import wrote {}", r.out.display());
    assert!(!r.text.contains("{\""), "raw JSON in the message:\n{}", r.text);
}

/// Imported whole and faithfully: exit 0, `--verify` finds 0 differences, `fwc test` passes.
fn faithful(r: &Run) {
    assert_eq!(r.code, Some(0), "{}", r.text);
    assert!(r.text.contains(" 0 differ"), "{}", r.text);
    let o = Command::new(env!("CARGO_BIN_EXE_fwc")).args(["test", r.out.to_str().unwrap()]).output().unwrap();
    assert!(o.status.success(), "fwc test of the import: {}", text(&o));
}

/// With --partial, the left-out rule's own flows are in the proof: --verify fails (exit 3).
fn partial_verify_differs(from: &str, name: &str) {
    let r = import(from, name, &["--partial", "--verify"]);
    assert_eq!(r.code, Some(3), "a left-out rule must make --verify fail:\n{}", r.text);
    assert!(r.text.contains("differs:"), "{}", r.text);
}

/// The prerouting hook's filter chains (nft `hook prerouting`) become the `prerouting` block:
/// their drops are `deny` rules there, 0 differ, a reverse-path `fib` drop among them.
#[test]
fn prerouting_drops_import_as_the_prerouting_block() {
    if !privileged("prerouting_drops_import_as_the_prerouting_block") {
        return;
    }
    let r = import("nft", "prerouting.nft", &["--verify"]);
    faithful(&r);
    let pre = block(&r, "prerouting");
    assert!(pre.contains(r#"prerouting {
    deny "deny-from-192.0.2.0-24" from="192.0.2.0/24" comment="prerouting.nft:5""#), "{pre}");
    // The reverse-path drop (line 5) is the rpfilter deny; the source drop beside it (line 6)
    // a deny of the same block: the whole file imports, 0 differ.
    let r = import("nft", "fib.nft", &["--verify"]);
    faithful(&r);
    let pre = block(&r, "prerouting");
    assert!(pre.contains(r#"rpfilter="strict""#) && pre.contains(r#"from="192.0.2.0/24" comment="fib.nft:6""#), "{pre}");
}

/// A router's reverse-path filters and MSS clamping (nft `fib saddr [. iif] oif missing drop`
/// and `tcp option maxseg size set rt mtu` / `set 1380` in a mangle-priority forward chain;
/// iptables `-m rpfilter [--loose] --invert -j DROP` in raw/mangle PREROUTING and `-j TCPMSS
/// --clamp-mss-to-pmtu` / `--set-mss 1380`) import whole as `prerouting { deny … rpfilter= }`
/// and `forward { clamp-mss … }`, and the proof finds no difference.
#[test]
fn reverse_path_filters_and_mss_clamps_import_as_the_router_forms() {
    if !privileged("reverse_path_filters_and_mss_clamps_import_as_the_router_forms") {
        return;
    }
    for (from, name, wants) in [
        ("nft", "router.nft", &[r#"deny "rpfilter-wan0" in="wan0" rpfilter="strict""#, r#"deny "rpfilter" rpfilter="loose""#, r#"clamp-mss "clamp-mss-ppp0" out="ppp0""#, r#"clamp-mss "clamp-mss-wg0" out="wg0" mss=1380"#]),
        ("iptables", "router.v4", &[r#"deny "rpfilter-wan0" from="0.0.0.0/0" in="wan0" rpfilter="strict""#, r#"deny "rpfilter" from="0.0.0.0/0" rpfilter="loose""#, r#"clamp-mss "clamp-mss-ppp0" from="0.0.0.0/0" out="ppp0""#, r#"mss=1380"#]),
    ] {
        let r = import(from, name, &["--verify"]);
        faithful(&r);
        let all: String = std::fs::read_dir(r.out.join("rules")).unwrap().map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap()).collect();
        for want in wants {
            assert!(all.contains(want), "{name}: {want} not in\n{all}");
        }
        assert!(!r.text.contains("the match on tcp flags"), "{}", r.text);
    }
    // A clamp after `ct state new accept`, in a chain the forward chain jumps to (the VLAN
    // router MartijnVdS/debian-router's shape): it clamps only what gets there, so it is not
    // fwc's clamp-mss; refused by line, named as MSS clamping.
    refused(&import("nft", "clampjump.nft", &[]), &["clampjump.nft:5: MSS clamping", "type filter hook forward priority -150"]);
}

/// iptables' `raw` and `mangle` PREROUTING drops (a conntrack INVALID drop in mangle among
/// them) become the `prerouting` block, raw's first, 0 differ.
#[test]
fn iptables_mangle_and_raw_prerouting_drops_import_as_the_prerouting_block() {
    if !privileged("iptables_mangle_and_raw_prerouting_drops_import_as_the_prerouting_block") {
        return;
    }
    let r = import("iptables", "mangle.v4", &["--verify"]);
    faithful(&r);
    let pre = block(&r, "prerouting");
    for want in [r#"from="198.51.100.0/24" comment="mangle.v4:13""#, r#"state="invalid" comment="mangle.v4:7""#, r#"from="192.0.2.0/24" comment="mangle.v4:8""#] {
        assert!(pre.contains(want), "{want} in\n{pre}");
    }
}

/// What fwc's prerouting block would decide differently is refused by line, and the proof
/// catches it with --partial: an accept that spares packets from a later drop of its chain
/// (an accept there ends only that chain), a ct state match at raw priority (before
/// conntrack), a drop after DNAT matching the new destination. An accept after the chain's
/// last drop changes nothing and is merged.
#[test]
fn prerouting_accepts_and_drops_fwc_would_decide_differently_are_refused_by_line() {
    if !privileged("prerouting_accepts_and_drops_fwc_would_decide_differently_are_refused_by_line") {
        return;
    }
    let r = import("nft", "preaccept.nft", &[]);
    refused(&r, &["preaccept.nft:10: a drop on the prerouting hook (inet early raw, priority -300) matches a conntrack state before conntrack", "preaccept.nft:15: an accept on the prerouting hook (inet early pre, priority 0) that spares packets", "preaccept.nft:17: a drop on the prerouting hook (inet early pre, priority 0) matches the destination after DNAT"]);
    assert!(!r.text.contains("preaccept.nft:11:") && !r.text.contains("preaccept.nft:16:") && !r.text.contains("preaccept.nft:18:"), "{}", r.text);
    partial_verify_differs("nft", "preaccept.nft");
}

#[test]
fn a_routers_own_br_lan_bridge_is_not_dockers() {
    if !privileged("a_routers_own_br_lan_bridge_is_not_dockers") {
        return;
    }
    let r = import("iptables", "brmoyo.v4", &["--verify"]);
    faithful(&r);
    let fwd = std::fs::read_to_string(r.out.join("rules/20-forward.kdl")).unwrap();
    assert!(fwd.contains(r#"deny "deny-out-br-lan" "#) && fwd.contains(r#"out="br-lan""#) && fwd.contains(r#"in="br-lan""#), "{fwd}");
    assert!(!r.text.contains("container"), "{}", r.text);
}

/// A router-advertisement accept narrower than fwc's built-in (only on `wan0`, from fe80::/10)
/// is not merged into it: the import takes router advertisements out of the built-in
/// (`input router-advertisements="none"`) and keeps the accept as a rule, so a rogue RA on the
/// LAN is dropped as in the original (the case's own expectation).
#[test]
fn a_narrowed_router_advertisement_accept_is_not_merged_into_the_wider_builtin() {
    if !privileged("a_narrowed_router_advertisement_accept_is_not_merged_into_the_wider_builtin") {
        return;
    }
    let r = import("nft", "ra.nft", &["--verify"]);
    faithful(&r);
    let input = std::fs::read_to_string(r.out.join("rules/10-input.kdl")).unwrap();
    assert!(input.contains(r#"input policy=drop router-advertisements="none" {"#), "{input}");
    assert!(input.contains(r#"proto=icmpv6 icmp-type="nd-router-advert" from="fe80::/10" in="wan0""#), "{input}");
    std::fs::copy(case("ra-test.kdl"), r.out.join("tests/ra-test.kdl")).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_fwc")).args(["test", r.out.to_str().unwrap()]).output().unwrap();
    assert!(o.status.success() && text(&o).contains("PASS tests/ra-test.kdl"), "{}", text(&o));
}

#[test]
fn an_icmp_accept_after_the_invalid_drop_imports() {
    if !privileged("an_icmp_accept_after_the_invalid_drop_imports") {
        return;
    }
    let r = import("nft", "icmpinv.nft", &["--verify"]);
    faithful(&r);
    assert!(r.text.contains("icmpinv.nft:7: ICMP destination-unreachable after `ct state invalid drop` (icmpinv.nft:5)"), "{}", r.text);
}

/// ICMP accepts before the original's invalid drop (stock ufw's before6.rules `echo-reply`
/// from fe80::/10): the unsolicited ones are accepted by `state="invalid"` rules, which fwc
/// decides before its own invalid drop; the request keeps its place.
#[test]
fn an_icmp_accept_before_the_invalid_drop_imports_as_an_allow_of_invalid_packets() {
    if !privileged("an_icmp_accept_before_the_invalid_drop_imports_as_an_allow_of_invalid_packets") {
        return;
    }
    let r = import("nft", "icmpbefore.nft", &["--verify"]);
    faithful(&r);
    let input = std::fs::read_to_string(r.out.join("rules/10-input.kdl")).unwrap();
    assert!(input.contains(r#"proto=icmpv6 icmp-type="echo-reply" from="fe80::/10" state="invalid""#), "{input}");
    assert!(input.contains(r#"icmp-type="destination-unreachable" state="invalid""#) && input.contains(r#"icmp-type="echo-request" comment"#), "{input}");
}

#[test]
fn a_chain_shared_by_input_and_output_imports_into_rules_that_pass_check() {
    if !privileged("a_chain_shared_by_input_and_output_imports_into_rules_that_pass_check") {
        return;
    }
    let r = import("nft", "sharedbase.nft", &["--verify"]);
    faithful(&r);
    let output = std::fs::read_to_string(r.out.join("rules/20-output.kdl")).unwrap();
    assert!(!output.contains("in="), "{output}");
}

#[test]
fn interface_sets_become_interface_lists() {
    if !privileged("interface_sets_become_interface_lists") {
        return;
    }
    let r = import("nft", "ifset.nft", &["--verify"]);
    faithful(&r);
    let input = std::fs::read_to_string(r.out.join("rules/10-input.kdl")).unwrap();
    let top = std::fs::read_to_string(r.out.join("fwc.kdl")).unwrap();
    // Filter rules take a list (`in="br0,wbr0"`); masquerade one interface each.
    for (text, want) in [(&input, r#"in="br0,wbr0""#), (&top, r#"out="wan0""#), (&top, r#"out="ppp0""#)] {
        assert!(text.contains(want), "{want} in\n{text}");
    }
}

/// iptables' `--syn`, `! --syn`, `--tcp-flags`, `! -s`/`! -i`/`! --dport`/`! -o` and
/// `-m pkttype`; nft's `tcp flags` forms, `meta pkttype`, `!=` on addresses, ports and
/// interface sets: each read as fwc's own form, 0 differ.
#[test]
fn tcp_flags_negations_and_packet_types_import() {
    if !privileged("tcp_flags_negations_and_packet_types_import") {
        return;
    }
    let r = import("iptables", "tcpflags.v4", &["--verify"]);
    faithful(&r);
    let input = std::fs::read_to_string(r.out.join("rules/10-input.kdl")).unwrap();
    let forward = std::fs::read_to_string(r.out.join("rules/20-forward.kdl")).unwrap();
    for want in [
        r#"tcp-flags="!syn" from="0.0.0.0/0" comment="tcpflags.v4:6""#,
        r#"tcp-flags="none/fin,syn,rst,psh,ack,urg""#,
        r#"tcp-flags="fin,syn/fin,syn""#,
        r#"proto=tcp tcp-flags="syn" port=22"#,
        r#"to="127.0.0.0/8" in="!lo""#,
        r#"port=8080 from="!192.0.2.0/24""#,
        r#"port="!8080" from="192.0.2.0/24""#,
        r#"pkttype="broadcast""#,
    ] {
        assert!(input.contains(want), "{want} in\n{input}");
    }
    assert!(forward.contains(r#"in="eth1" out="!eth1""#), "{forward}");
    let r = import("nft", "forms.nft", &["--verify"]);
    faithful(&r);
    let input = std::fs::read_to_string(r.out.join("rules/10-input.kdl")).unwrap();
    for want in [r#"tcp-flags="!syn""#, r#"pkttype="broadcast,multicast""#, r#"from="!10.0.0.0/8""#, r#"in="!eth0,eth1""#, r#"port="!22,80,443""#] {
        assert!(input.contains(want), "{want} in\n{input}");
    }
}

/// A DNAT restricted to an input interface (`-i wan0 … -j DNAT`) is a forward with `in=`; a
/// DNAT map keyed by port is one forward per element. Without a destination address these
/// DNATs also rewrite what is routed through on wan0 to other hosts: the import says so with
/// `destinations="any"`, and the proof, which samples those routed flows, finds 0 differences.
#[test]
fn a_dnat_on_an_input_interface_is_a_forward_with_in() {
    if !privileged("a_dnat_on_an_input_interface_is_a_forward_with_in") {
        return;
    }
    let r = import("iptables", "dnatin.v4", &["--verify"]);
    faithful(&r);
    let top = std::fs::read_to_string(r.out.join("fwc.kdl")).unwrap();
    // No destination match: connections routed through the host are DNATed too.
    assert!(top.contains(r#"forward "fwd-tcp-8443" listen=":8443" to="192.168.1.20:443" in="wan0" destinations="any""#), "{top}");
    assert!(top.contains(r#"listen=":5060" to="192.168.1.30:5062" in="wan0""#), "{top}");
    // A DNAT map keyed by the destination port: one forward per element.
    let r = import("nft", "dnatmap.nft", &["--verify"]);
    faithful(&r);
    let top = std::fs::read_to_string(r.out.join("fwc.kdl")).unwrap();
    for want in [r#"listen=":80" to="192.168.1.20:8080" in="wan0""#, r#"listen=":443" to="192.168.1.20:8443" in="wan0""#, r#"proto=udp listen=":5060" to="192.168.1.30" in="wan0""#] {
        assert!(top.contains(want), "{want} in\n{top}");
    }
}

/// A DNAT of a port list without a new port is one forward per port; `udp dport 0-65535` is
/// every port (no port match). Both were refused; the DNAT's routed flows (no destination
/// address: it rewrites what is routed through on wlan0 too) are in the proof and agree.
#[test]
fn a_dnat_port_list_and_a_full_port_range_import() {
    if !privileged("a_dnat_port_list_and_a_full_port_range_import") {
        return;
    }
    let r = import("nft", "dnatlist.nft", &["--verify"]);
    faithful(&r);
    let top = std::fs::read_to_string(r.out.join("fwc.kdl")).unwrap();
    for want in [r#"listen=":80" to="198.18.3.3" in="wlan0""#, r#"listen=":443" to="198.18.3.3" in="wlan0""#] {
        assert!(top.contains(want), "{want} in\n{top}");
    }
    assert!(block(&r, "input").contains(r#"proto=udp from="192.168.1.0/24" comment="dnatlist.nft:15""#), "{}", block(&r, "input"));
}

/// A VPN gateway's `-s 10.8.0.0/24 ! -d 10.8.0.0/24 -j MASQUERADE` is the user's (not Docker's
/// hairpin, which has the same address on both sides): imported with its negated destination,
/// never left out in silence. The other source NAT forms routers use: two matches on the
/// source (`ip saddr A ip saddr != B`: `from-except=`), a masquerade restricted by input
/// interfaces (a set of them: `in=` keeps the list), a negated input interface.
#[test]
fn a_masquerade_with_a_negated_destination_is_not_taken_for_dockers() {
    if !privileged("a_masquerade_with_a_negated_destination_is_not_taken_for_dockers") {
        return;
    }
    let r = import("iptables", "masqneg.v4", &["--verify"]);
    faithful(&r);
    assert!(!r.text.contains("container"), "{}", r.text);
    let top = std::fs::read_to_string(r.out.join("fwc.kdl")).unwrap();
    assert!(top.contains(r#"from="10.8.0.0/24" to="!10.8.0.0/24""#), "{top}");
    let r = import("nft", "snatforms.nft", &["--verify"]);
    faithful(&r);
    let top = std::fs::read_to_string(r.out.join("fwc.kdl")).unwrap();
    for want in [
        r#"from="10.0.0.0/8" from-except="10.9.0.0/16" out="wan0""#,
        r#"in="lan0,wlan0" out="wan1""#,
        r#"dst="!192.168.0.0/16" in="!lan0" out="wan2" to="198.18.0.1""#,
    ] {
        assert!(top.contains(want), "{want} in\n{top}");
    }
}

#[test]
fn port_0_is_refused_by_line_and_nothing_is_written() {
    if !privileged("port_0_is_refused_by_line_and_nothing_is_written") {
        return;
    }
    refused(&import("iptables", "fuzz/port0.v4", &[]), &["port0.v4:5: port `0`: fwc's ports are 1-65535"]);
    refused(&import("firewalld", "fuzz/fwd-port0", &["--skip-proof"]), &["zones/public.xml:3: port `0`"]);
}

/// firewalld's XML read by fwc alone (--skip-proof): no root, no firewalld.
#[test]
fn firewalld_ports_with_spaces_or_out_of_range_never_panic() {
    let r = import("firewalld", "fuzz/fwd-port-space", &["--skip-proof"]);
    assert_eq!(r.code, Some(0), "{}", r.text);
    let input = std::fs::read_to_string(r.out.join("rules/10-input-public.kdl")).unwrap();
    assert!(input.contains("proto=tcp port=22 "), "{input}");
    let r = import("firewalld", "fuzz/fwd-sport-space", &["--skip-proof"]);
    assert_eq!(r.code, Some(0), "{}", r.text);
    refused(&import("firewalld", "fuzz/fwd-port-99999", &["--skip-proof"]), &["zones/public.xml:3: port `99999`"]);
}

#[test]
fn partial_verify_without_a_proof_says_what_the_evaluator_lacks() {
    if !privileged("partial_verify_without_a_proof_says_what_the_evaluator_lacks") {
        return;
    }
    // (A construct the evaluator does not model: it once was `meta pkttype`, which it models now.)
    let r = import("nft", "fuzz/meta-cpu.nft", &["--partial", "--verify"]);
    assert_eq!(r.code, Some(1), "{}", r.text);
    assert!(r.text.contains("meta-cpu.nft:5") && r.text.contains("warning:") && !r.text.contains("import with --partial"), "{}", r.text);
    assert!(!r.out.exists(), "{}", r.text);
}

#[test]
fn an_iptables_file_nft_cannot_read_back_is_located_in_the_original() {
    if !privileged("an_iptables_file_nft_cannot_read_back_is_located_in_the_original") || !fwc_testkit::tool("an_iptables_file_nft_cannot_read_back_is_located_in_the_original", "iptables-nft-restore", "iptables") {
        return;
    }
    let r = import("iptables", "fuzz/iprange-reversed.v4", &[]);
    refused(&r, &["iprange-reversed.v4:3", "Range has zero or negative size"]);
    assert!(!r.text.contains("translated.nft"), "{}", r.text);
    let r = import("iptables", "fuzz/unicode-chain.v4", &[]);
    refused(&r, &["unicode-chain.v4:"]);
    assert!(!r.text.contains("translated.nft"), "{}", r.text);
}

/// The proof's firewalld must not hang on nested entities nor die without a reason: fwc's
/// own reader refuses them first, naming the file.
#[test]
fn firewalld_xml_firewalld_cannot_load_is_refused_naming_the_file() {
    let r = import("firewalld", "fuzz/fwd-entities", &[]);
    refused(&r, &["zones/public.xml"]);
    let r = import("firewalld", "fuzz/fwd-encoding", &[]);
    refused(&r, &["zones/public.xml"]);
}

/// firewalld ignores repeated elements; the import takes each once (it once wrote a rules file
/// per repeated `<interface>` and a rule per repeated `<port>`, named by a linear probe).
#[test]
fn firewalld_repeated_elements_are_imported_once() {
    let tmp = tempfile::tempdir().unwrap();
    let conf = tmp.path().join("firewalld");
    std::fs::create_dir_all(conf.join("zones")).unwrap();
    std::fs::write(conf.join("firewalld.conf"), "DefaultZone=public\n").unwrap();
    let mut zone = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<zone>\n  <port port=\"22\" protocol=\"tcp\"/>\n");
    for _ in 0..5000 {
        zone.push_str("  <interface name=\"eth0\"/>\n  <port port=\"8080\" protocol=\"tcp\"/>\n  <service name=\"ssh\"/>\n");
    }
    zone.push_str("</zone>\n");
    std::fs::write(conf.join("zones/public.xml"), zone).unwrap();
    let out = tmp.path().join("fw");
    let o = Command::new(env!("CARGO_BIN_EXE_fwc")).args(["import", "--from", "firewalld", conf.to_str().unwrap(), "--out", out.to_str().unwrap(), "--skip-proof", "--firewalld-lib", Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/import/firewalld-lib").to_str().unwrap()]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let files: Vec<_> = std::fs::read_dir(out.join("rules")).unwrap().flatten().collect();
    // input, forward, output, and prerouting (firewalld's default IPv6 reverse-path filter).
    assert!(files.len() <= 5, "{} rules files", files.len());
    let input: String = files.iter().map(|f| std::fs::read_to_string(f.path()).unwrap()).collect();
    assert!(input.contains("tcp-8080") && !input.contains("tcp-8080-2") && !input.contains("ssh-2"), "{input}");
}

/// firewalld 2's default `IPv6_rpfilter=strict` is reverse-path filtering as `yes` is: it
/// imports as fwc's rpfilter deny for IPv6, never passed over in silence.
#[test]
fn firewalld_strict_rpfilter_imports_as_the_rpfilter_deny() {
    let r = import("firewalld", "fwd-rpfilter-strict", &["--skip-proof", "--firewalld-lib", Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/import/firewalld-lib").to_str().unwrap().to_string().leak()]);
    assert_eq!(r.code, Some(0), "{}", r.text);
    assert!(r.text.contains("IPv6_rpfilter=strict: imported as `prerouting { deny rpfilter=\"strict\" }`"), "{}", r.text);
    let all: String = std::fs::read_dir(r.out.join("rules")).unwrap().map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap()).collect();
    assert!(all.contains(r#"deny "ipv6-rpfilter" from="::/0" rpfilter="strict""#), "{all}");
}

/// Verdict maps (a home router's `ct state vmap` and `iifname vmap { … : jump … }`) are
/// flattened into one rule per element.
#[test]
fn verdict_maps_are_flattened() {
    if !privileged("verdict_maps_are_flattened") {
        return;
    }
    let r = import("nft", "vmap.nft", &["--verify"]);
    faithful(&r);
    let input = std::fs::read_to_string(r.out.join("rules/10-input.kdl")).unwrap();
    for want in [r#"proto=tcp port=22 from="0.0.0.0/0" in="br0" comment="vmap.nft:4""#, r#"proto=udp port=53 from="0.0.0.0/0" in="br0""#, r#"port=80"#] {
        assert!(input.contains(want), "{want} in\n{input}");
    }
    // A concatenation matched against a set (named or not): one rule per element.
    let r = import("nft", "concat.nft", &["--verify"]);
    faithful(&r);
    let input = std::fs::read_to_string(r.out.join("rules/10-input.kdl")).unwrap();
    for want in [r#"proto=tcp port=53 from="10.0.0.0/8""#, r#"proto=udp port=53 from="10.0.0.0/8""#, r#"proto=tcp port=22"#, r#"proto=udp port=51820"#] {
        assert!(input.contains(want), "{want} in\n{input}");
    }
}

/// ICMP matches iptables-nft keeps as `xt match icmp6`/`icmp` (numeric types, type/code: every
/// stock ufw's before6.rules) are read from the original line as nftables matches: the
/// evaluator runs them (the proof exists) and the import translates them.
#[test]
fn iptables_icmp_xt_matches_are_read_as_native_matches() {
    if !privileged("iptables_icmp_xt_matches_are_read_as_native_matches") {
        return;
    }
    let r = import("iptables", "xticmp.v6", &["--verify"]);
    faithful(&r);
    assert!(r.text.contains("xticmp.v6:9: an on-link accept (hop limit) of ICMPv6 ind-neighbor-solicit"), "{}", r.text);
    let input = std::fs::read_to_string(r.out.join("rules/10-input.kdl")).unwrap();
    assert!(input.contains("icmp-type=\"mld-listener-query\" from=\"fe80::/10\""), "{input}");
    // A type with a code: `icmp-type=3 icmp-code=4`.
    let r = import("iptables", "xticmp.v4", &["--verify"]);
    faithful(&r);
    let fwd = std::fs::read_to_string(r.out.join("rules/20-forward.kdl")).unwrap();
    assert!(fwd.contains("icmp-type=\"destination-unreachable\" icmp-code=\"frag-needed\""), "{fwd}");
}

/// `iif "wan0"` (an interface index, resolved by nft when it loads the file) loads in the
/// scratch namespace: the import creates a link of each name the file gives `iif`/`oif`.
#[test]
fn interfaces_named_by_index_exist_in_the_scratch_namespace() {
    if !privileged("interfaces_named_by_index_exist_in_the_scratch_namespace") {
        return;
    }
    let r = import("nft", "iif.nft", &["--verify"]);
    faithful(&r);
    let input = std::fs::read_to_string(r.out.join("rules/10-input.kdl")).unwrap();
    assert!(input.contains("in=\"wan0\""), "{input}");
}

/// `--live` on a host whose rules iptables-nft loaded: `nft -j` lists them with opaque `xt`
/// statements (even `-m conntrack`); the import reads them back as native nftables and keeps
/// the host's handles as origins.
#[test]
fn a_live_iptables_nft_ruleset_imports_with_its_handles() {
    if !privileged("a_live_iptables_nft_ruleset_imports_with_its_handles") {
        return;
    }
    let ns = Netns::new("lx");
    let load = Command::new("ip").args(["netns", "exec", &ns.name, "iptables-nft-restore", case("brmoyo.v4").to_str().unwrap()]).output().unwrap();
    assert!(load.status.success(), "{}", text(&load));
    let listing = Command::new("ip").args(["netns", "exec", &ns.name, "nft", "-a", "list", "ruleset"]).output().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fw");
    let o = Command::new(env!("CARGO_BIN_EXE_fwc")).args(["import", "--from", "nft", "--live", "--netns", &ns.name, "--out", out.to_str().unwrap(), "--verify"]).output().unwrap();
    assert!(o.status.success() && text(&o).contains(" 0 differ"), "{}", text(&o));
    // Every origin names a handle the host's own listing has.
    let rules: String = std::fs::read_dir(out.join("rules")).unwrap().map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap()).collect();
    let host = String::from_utf8_lossy(&listing.stdout).into_owned();
    let handles: Vec<&str> = rules.split("handle ").skip(1).map(|r| r.split('"').next().unwrap()).collect();
    assert!(!handles.is_empty(), "{rules}");
    for h in handles {
        assert!(host.contains(&format!("# handle {h}\n")), "handle {h} is not the host's:\n{host}\n{rules}");
    }
}

/// A user the importing host does not have (`-m owner --uid-owner debian-tor-x`): iptables
/// resolves it while loading, so the import gives it an id in a scratch mount namespace; the
/// owner match is then refused by name and line, not a load failure.
#[test]
fn owner_names_this_host_lacks_load_and_are_refused_by_line() {
    if !privileged("owner_names_this_host_lacks_load_and_are_refused_by_line") {
        return;
    }
    let r = import("iptables", "owner.v4", &[]);
    refused(&r, &["owner.v4:7: the match on meta skuid"]);
    assert!(!r.text.contains("must load with its own tool"), "{}", r.text);
}
