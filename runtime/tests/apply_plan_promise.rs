//! An apply does exactly what its plan said: the edits that nft refused as a diff (and that
//! were silently turned into a whole-table replace, resetting counters, per-source tracking
//! sets, connection counts and rate-limit state) now apply as the diff the plan showed.
//! Real `fwc`, real nft, inside `fwc-t-*` namespaces.

mod plan_common;

use fwc_testkit::{output_text as text, privileged, Netns};
use plan_common::{apply_as_planned, replaces_table, rules_by_handle, set_elements, Repo};

/// The example of the report: a kernel forward removed. Its chains were deleted in name
/// order, `fwd_dnat` before the base chains that jump to it: "Device or resource busy".
#[test]
fn removing_a_kernel_forward_is_a_diff() {
    if !privileged("removing_a_kernel_forward_is_a_diff") {
        return;
    }
    let ns = Netns::new("prm");
    let r = Repo::new(&ns.name);
    let a = "fwc 1\ninput policy=drop { allow \"ssh\" proto=tcp port=22 }\nforward \"web\" listen=\":8080\" to=\"198.19.0.2:80\"\n";
    r.apply(a);
    let plan = apply_as_planned(&r, "fwc 1\ninput policy=drop { allow \"ssh\" proto=tcp port=22 }\n");
    assert_eq!(plan["nftables"]["mode"], "diff");
    // And back: the forward's chains, maps and sets created again, as a diff.
    apply_as_planned(&r, a);
}

/// docs/rules.md's first per-source example, then its second: a changed map entry was read
/// back as two elements (key and value), so the diff deleted a value as a key ("invalid data
/// type, expected concatenation of (Internet protocol, internet network service)").
#[test]
fn per_source_examples_of_the_docs_apply_one_after_the_other_as_diffs() {
    if !privileged("per_source_examples_of_the_docs_apply_one_after_the_other_as_diffs") {
        return;
    }
    let ns = Netns::new("prp");
    let r = Repo::new(&ns.name);
    r.apply(
        r#"fwc 1
input policy=drop {
    allow "ssh" proto=tcp port=22 rate-per-source="5/minute burst 5" max-conns-per-source=3
}
forward "web" listen=":8080" to="198.19.0.2:80" conn-rate-per-source="20/second" max-conns-per-source=50
"#,
    );
    let plan = apply_as_planned(
        &r,
        r#"fwc 1
input policy=drop {
    // one IPv6 customer per /56, at most 10 sessions each; a bigger table
    allow "imap" proto=tcp port=993 max-conns-per-source=10 per-source-prefix6=56 per-source-size=200000
}
forward "game" proto=udp listen=":27015" to="198.19.0.3:27015" conn-rate-per-source="10/second burst 20" max-conns-per-source=4
"#,
    );
    assert_eq!(plan["nftables"]["mode"], "diff");
}

/// `proto=` changed on a forward with `conn-rate-per-source`: the new map entries went in
/// without their values ("Invalid argument"). As a diff, the per-source set is not touched:
/// the sources it tracks stay tracked.
#[test]
fn protocol_change_of_a_forward_keeps_its_tracked_sources() {
    if !privileged("protocol_change_of_a_forward_keeps_its_tracked_sources") {
        return;
    }
    let ns = Netns::new("prq");
    let r = Repo::new(&ns.name);
    let web = |proto: &str| {
        format!("fwc 1\ninput policy=drop {{ allow \"ssh\" proto=tcp port=22 }}\nforward \"web\" proto={proto} listen=\":8080\" to=\"198.19.0.2:80\" conn-rate-per-source=\"20/second\"\n")
    };
    r.apply(&web("tcp"));
    ns.exec(&["nft", "add", "element", "inet", "fwc", "_ps_fwd_web_r_v4", "{ 198.18.7.7 timeout 1h }"]);
    let plan = apply_as_planned(&r, &web("udp"));
    assert_eq!(plan["nftables"]["mode"], "diff");
    assert_eq!(set_elements(&r.live())["_ps_fwd_web_r_v4"], vec!["\"198.18.7.7\"".to_string()]);
}

/// A set's declaration changes (a per-source set's size here): nft cannot change it in place,
/// so a new set of the same name replaces it in the same batch, the rules using it go before
/// and come back after; the plan says so and names the sources it stops tracking. The rest
/// of the table keeps its handles and counters.
#[test]
fn a_set_whose_declaration_changes_is_replaced_alone_and_the_plan_says_so() {
    if !privileged("a_set_whose_declaration_changes_is_replaced_alone_and_the_plan_says_so") {
        return;
    }
    let ns = Netns::new("prd");
    let r = Repo::new(&ns.name);
    let ssh = |size: u32| format!("fwc 1\ninput policy=drop {{\n    allow \"web\" proto=tcp port=80\n    allow \"ssh\" proto=tcp port=22 rate-per-source=\"5/minute\" per-source-size={size}\n}}\n");
    r.apply(&ssh(4096));
    ns.exec(&["nft", "add", "element", "inet", "fwc", "_ps_input_ssh_r_v4", "{ 198.18.7.7 timeout 1h, 198.18.7.8 timeout 1h }"]);
    let plan = apply_as_planned(&r, &ssh(8192));
    assert_eq!(plan["nftables"]["mode"], "diff", "{:#}", plan["nftables"]);
    let resets = plan["nftables"]["resets"].to_string();
    assert!(resets.contains("set _ps_input_ssh_r_v4 is replaced (its declaration changes): its 2 tracked sources are reset"), "{resets}");
    assert!(plan["nftables"].get("needs_allow_replace").is_none(), "{:#}", plan["nftables"]);
    let live = r.live();
    let size = live["nftables"].as_array().unwrap().iter().find_map(|o| o.get("set").filter(|s| s["name"] == "_ps_input_ssh_r_v4")).unwrap()["size"].clone();
    assert_eq!(size, 8192);
}

/// A change no diff can make (a set fwc now declares already exists live, made by hand: its
/// elements are not fwc's to keep or drop): the plan says the table is replaced whole and what
/// that resets; `fwc apply` refuses it (exit 1, nothing changed, the refusal in the audit log)
/// unless given --allow-replace.
#[test]
fn a_replace_no_diff_can_avoid_is_refused_without_allow_replace() {
    if !privileged("a_replace_no_diff_can_avoid_is_refused_without_allow_replace") {
        return;
    }
    let ns = Netns::new("prr");
    let r = Repo::new(&ns.name);
    r.apply("fwc 1\ninput policy=drop { allow \"ssh\" proto=tcp port=22 }\n");
    ns.exec(&["nft", "add", "set", "inet", "fwc", "office_v4", "{ type ipv4_addr; flags interval; }"]);
    r.write(&[("fwc.kdl", "fwc 1\nset \"office\" \"203.0.113.0/24\"\ninput policy=drop {\n    allow \"ssh\" proto=tcp port=22\n    allow \"office\" proto=tcp port=443 from=\"@office\"\n}\n")]);
    let plan = r.plan();
    assert_eq!(plan["nftables"]["mode"], "full-replace", "{:#}", plan["nftables"]);
    assert_eq!(plan["nftables"]["needs_allow_replace"], true, "{:#}", plan["nftables"]);
    assert!(plan["nftables"]["resets"].to_string().contains("rules are reset"), "{:#}", plan["nftables"]);
    let text_plan = text(&r.fwc(&["plan", r.repo.to_str().unwrap()]));
    assert!(text_plan.contains("refuses it unless given --allow-replace"), "{text_plan}");

    let before = r.live();
    let batches = r.batch_count();
    let o = r.apply_out(&[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("refusing to replace table inet fwc whole"), "{}", text(&o));
    assert_eq!(r.batch_count(), batches, "a batch was committed");
    assert_eq!(rules_by_handle(&r.live()), rules_by_handle(&before), "the live table changed");
    let audit = std::fs::read_to_string(r.state.join("audit.jsonl")).unwrap();
    let last: serde_json::Value = serde_json::from_str(audit.lines().last().unwrap()).unwrap();
    assert_eq!(last["result"], "aborted", "{last:#}");
    assert!(last["detail"].as_str().unwrap_or_default().contains("refusing to replace table inet fwc whole"), "{last:#}");

    let o = r.apply_out(&["--allow-replace"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(replaces_table(&r.last_batch()));
}

/// The README's example repository, as written there.
fn readme_example() -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let from = readme.find("## A rule repository").expect("README has the example");
    let body = &readme[from..];
    let start = body.find("```kdl\n").unwrap() + "```kdl\n".len();
    body[start..start + body[start..].find("```").unwrap()].to_string()
}

/// `fwc plan` says what the apply needs of the host that it lacks (the interface a shape
/// names), and `fwc apply` refuses with the same words, changing nothing; in namespaces laid
/// out as scripts/demo.sh lays them out (the host's LAN side is eth1) the README's example
/// applies as written.
#[test]
fn the_plan_names_a_missing_interface_and_the_readme_example_applies_in_the_demo_namespaces() {
    if !privileged("the_plan_names_a_missing_interface_and_the_readme_example_applies_in_the_demo_namespaces") {
        return;
    }
    let kdl = readme_example();
    let words = "shape \"guests\": interface eth1 (dev=eth1) does not exist here: no interface to shape";
    // A host without eth1.
    let bare = Netns::new("prn");
    bare.exec(&["ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1"]);
    bare.exec(&["ip", "link", "set", "v0", "up"]);
    let r = Repo::new(&bare.name);
    r.write(&[("fwc.kdl", &kdl)]);
    let plan = r.plan();
    assert!(plan["host_needs"].to_string().contains(&words.replace('"', "\\\"")), "{:#}", plan["host_needs"]);
    let o = r.apply_out(&[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains(words), "{}", text(&o));
    assert!(!bare.try_exec(&["nft", "list", "table", "inet", "fwc"]).status.success(), "the apply changed the host");

    // The demo's namespaces: client -> host (eth1 | backend side) -> backend.
    let (client, host, backend) = (Netns::new("prc"), Netns::new("prh"), Netns::new("prb"));
    let link = |a: &Netns, an: &str, b: &Netns, bn: &str| {
        fwc_testkit::sh(&format!("ip link add {an} netns {} type veth peer name {bn} netns {}", a.name, b.name));
        a.exec(&["ip", "link", "set", an, "up"]);
        b.exec(&["ip", "link", "set", bn, "up"]);
    };
    link(&client, "fwcd-c", &host, "eth1");
    link(&host, "fwcd-hb", &backend, "fwcd-b");
    host.exec(&["ip", "addr", "add", "198.18.1.1/24", "dev", "eth1"]);
    let r = Repo::new(&host.name);
    r.write(&[("fwc.kdl", &kdl)]);
    assert!(r.plan()["host_needs"].as_array().is_some_and(Vec::is_empty), "{:#}", r.plan()["host_needs"]);
    let o = r.apply_out(&[]);
    assert!(o.status.success(), "the README's example does not apply in the demo's namespaces:\n{}", text(&o));
}
