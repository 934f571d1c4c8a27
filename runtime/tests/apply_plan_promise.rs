//! An apply does exactly what its plan said: the edits that nft refused as a diff (and that
//! were silently turned into a whole-table replace, resetting counters, per-source tracking
//! sets, connection counts and rate-limit state) now apply as the diff the plan showed.
//! Real `fwc`, real nft, inside `fwc-t-*` namespaces.

mod plan_common;

use fwc_testkit::{output_text as text, privileged, Netns};
use plan_common::{replaces_table, rules_by_handle, set_elements, Repo};

/// Plan `kdl` over what `r` applied, apply it, and hold the apply to the plan: the same mode,
/// no fallback, and the rules the plan keeps keep their handles and counters (as many as it
/// said). Returns the plan.
pub fn apply_as_planned(r: &Repo, kdl: &str) -> serde_json::Value {
    r.write(&[("fwc.kdl", kdl)]);
    let plan = r.plan();
    let before = rules_by_handle(&r.live());
    let batches = r.batch_count();
    let o = r.apply_out(&[]);
    let out = text(&o);
    assert!(o.status.success(), "fwc apply failed:\n{out}");
    assert!(!out.contains("replacing the table whole"), "the apply fell back to a whole-table replace:\n{out}");
    let mode = plan["nftables"]["mode"].as_str().unwrap_or_default().to_string();
    assert!(r.batch_count() > batches || mode == "unchanged", "no batch committed:\n{out}");
    assert_eq!(replaces_table(&r.last_batch()), mode == "full-replace", "plan said {mode}:\n{out}");
    let after = rules_by_handle(&r.live());
    let kept: Vec<_> = after.iter().filter(|(h, (c, _))| before.get(h).is_some_and(|(bc, _)| bc == c)).collect();
    if mode == "diff" {
        assert_eq!(kept.len() as u64, plan["nftables"]["rules_kept"].as_u64().unwrap(), "rules kept (plan: {:#})", plan["nftables"]);
    }
    for (h, (_, packets)) in kept {
        assert!(*packets >= before[h].1, "rule {h}: its counter went back from {} to {packets}", before[h].1);
    }
    plan
}

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
