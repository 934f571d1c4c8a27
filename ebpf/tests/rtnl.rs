//! Route-netlink queries against the real kernel, in a test namespace: which links are up, the
//! root qdisc, and fwc's clsact filter told apart from a foreign one. Each check runs twice:
//! here, and in a re-run of this test with an empty PATH, where the old `ip -j link` /
//! `tc qdisc show` / `tc -j filter show` shell-outs found nothing and fwc silently shaped no
//! interface, paced nothing and lost track of its own filters.

mod common;

use std::process::Command;

use common::*;
use fwc_qos::{rtnl, AttachMode, Qos};
use fwc_testkit::{unique_name, Netns};

/// What the namespace holds, as the checks need it.
struct Expect {
    ns: String,
    /// Up, fwc's filter attached by the loader (clsact fallback), root qdisc `root_kind`.
    ours: String,
    /// `fq` where the kernel has it (this is what enables EDT pacing), else `pfifo`.
    root_kind: String,
    /// Down, a foreign bpf filter (another program, another name).
    foreign: String,
    /// Up, fwc's pinned program attached by hand (`tc … object-pinned`): a different filter
    /// name, recognised by the program's name.
    by_hand: String,
    /// Down, no clsact qdisc at all.
    bare: String,
    ours_filter: (u16, u32),
    by_hand_filter: (u16, u32),
}

impl Expect {
    fn encode(&self) -> String {
        let f = |(p, h): (u16, u32)| format!("{p}:{h}");
        [&self.ns, &self.ours, &self.root_kind, &self.foreign, &self.by_hand, &self.bare, &f(self.ours_filter), &f(self.by_hand_filter)]
            .map(|s| s.as_str().to_string())
            .join(",")
    }

    fn decode(s: &str) -> Expect {
        let v: Vec<&str> = s.split(',').collect();
        let f = |s: &str| {
            let (p, h) = s.split_once(':').unwrap();
            (p.parse().unwrap(), h.parse().unwrap())
        };
        Expect {
            ns: v[0].into(),
            ours: v[1].into(),
            root_kind: v[2].into(),
            foreign: v[3].into(),
            by_hand: v[4].into(),
            bare: v[5].into(),
            ours_filter: f(v[6]),
            by_hand_filter: f(v[7]),
        }
    }
}

/// Every query, inside the namespace.
fn check(e: &Expect) {
    in_netns(&e.ns, || {
        let mut up = vec!["lo".to_string(), e.ours.clone(), e.by_hand.clone()];
        up.sort();
        assert_eq!(rtnl::up_links().unwrap(), up, "exactly the links that are up");
        let all: Vec<String> = rtnl::links().unwrap().into_iter().map(|l| l.name).collect();
        for l in [&e.ours, &e.foreign, &e.by_hand, &e.bare] {
            assert!(all.contains(l), "{l} listed among all links: {all:?}");
        }

        let index = fwc_qos::sys::ifindex(&e.ours).unwrap();
        assert_eq!(rtnl::root_qdisc_kind(index).unwrap().as_deref(), Some(e.root_kind.as_str()));
        assert_eq!(fwc_qos::root_qdisc_is_fq(&e.ours).unwrap(), e.root_kind == "fq", "{} has root {}", e.ours, e.root_kind);
        assert!(!fwc_qos::root_qdisc_is_fq(&e.foreign).unwrap(), "{} has no fq", e.foreign);
        let gone = fwc_qos::root_qdisc_is_fq("fwc-t-nosuch").unwrap_err();
        assert!(gone.to_string().contains("fwc-t-nosuch"), "{gone}");

        assert_eq!(fwc_qos::clsact_filter(&e.ours).unwrap(), Some(e.ours_filter), "fwc's filter found");
        assert_eq!(fwc_qos::clsact_filter(&e.by_hand).unwrap(), Some(e.by_hand_filter), "fwc's program found by name");
        assert_eq!(fwc_qos::clsact_filter(&e.foreign).unwrap(), None, "a foreign filter is not fwc's");
        assert_eq!(fwc_qos::clsact_filter(&e.bare).unwrap(), None, "no clsact qdisc, no filter");
        assert_eq!(fwc_qos::clsact_filter("fwc-t-nosuch").unwrap(), None);
        assert_eq!(fwc_qos::attachment(&e.ours), Some(AttachMode::Clsact));
        assert_eq!(fwc_qos::attachment(&e.foreign), None);
    });
}

/// The egress bpf filters of `dev` as `tc -j filter show` lists them: (pref, handle, name).
fn tc_filters(ns: &Netns, dev: &str) -> Vec<(u16, u32, String)> {
    let out = ns.exec(&["tc", "-j", "filter", "show", "dev", dev, "egress"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .filter_map(|f| {
            let o = f.get("options")?;
            let handle = u32::from_str_radix(o.get("handle")?.as_str()?.trim_start_matches("0x"), 16).ok()?;
            let name = o.get("bpf_name").and_then(|n| n.as_str()).unwrap_or_default().to_string();
            Some((f["pref"].as_u64().unwrap() as u16, handle, name))
        })
        .collect()
}

#[test]
fn rtnl_links_root_qdisc_and_clsact_filters() {
    if let Some(arg) = fwc_testkit::rerun_arg() {
        check(&Expect::decode(&arg));
        return;
    }
    if !fwc_testkit::privileged("rtnl_links_root_qdisc_and_clsact_filters") {
        return;
    }
    let ns = Netns::new("n");
    let [ours, foreign, by_hand, bare] = ["x", "y", "z", "w"].map(unique_name);
    ns.exec(&["ip", "link", "add", &ours, "type", "veth", "peer", "name", &foreign]);
    ns.exec(&["ip", "link", "add", &by_hand, "type", "veth", "peer", "name", &bare]);
    ns.exec(&["ip", "link", "set", &ours, "up"]);
    ns.exec(&["ip", "link", "set", &by_hand, "up"]);
    let root_kind = ["fq", "pfifo"]
        .into_iter()
        .find(|k| ns.try_exec(&["tc", "qdisc", "replace", "dev", &ours, "root", k]).status.success())
        .expect("a root qdisc");
    if root_kind != "fq" {
        eprintln!("NOTE: this kernel has no fq qdisc (sch_fq); the positive fq case is not checked here, only the kind");
    }

    let mut root = PinRoot::new("rtnl");
    root.netns = Some(ns.name.clone());
    let _q = in_netns(&ns.name, || {
        let mut q = Qos::open(&root.path).expect("open");
        q.force_clsact = true;
        assert_eq!(q.attach(&ours).unwrap(), AttachMode::Clsact);
        q
    });
    // fwc's pinned program, attached by hand under another filter name.
    let pinned = root.path.join(fwc_qos::PROG_PIN);
    ns.exec(&["tc", "qdisc", "add", "dev", &by_hand, "clsact"]);
    // nsenter, not `ip netns exec`: that remounts /sys, hiding the bpffs the pin is on.
    fwc_testkit::run(
        Command::new("nsenter")
            .arg(format!("--net={}", ns.path()))
            .args(["tc", "filter", "add", "dev", &by_hand, "egress", "bpf", "da", "object-pinned"])
            .arg(&pinned),
    );
    // A foreign program (another name), attached by tc from its object file.
    let dir = tempfile::tempdir().unwrap();
    let (src, obj) = (dir.path().join("foreign.c"), dir.path().join("foreign.o"));
    std::fs::write(
        &src,
        "__attribute__((section(\"tc\"), used)) int foreign(void *skb) { return 0; }\n\
         char _license[] __attribute__((section(\"license\"), used)) = \"GPL\";\n",
    )
    .unwrap();
    fwc_testkit::run(Command::new("clang").args(["-O2", "-g", "-target", "bpf", "-c"]).arg(&src).arg("-o").arg(&obj));
    ns.exec(&["tc", "qdisc", "add", "dev", &foreign, "clsact"]);
    ns.exec(&["tc", "filter", "add", "dev", &foreign, "egress", "bpf", "da", "obj", obj.to_str().unwrap(), "sec", "tc"]);

    let ours_tc = tc_filters(&ns, &ours);
    assert_eq!(ours_tc.len(), 1, "{ours_tc:?}");
    assert_eq!(ours_tc[0].2, fwc_qos::maps::PROG_NAME, "the loader names its filter after the program");
    let by_hand_tc = tc_filters(&ns, &by_hand);
    assert_eq!(by_hand_tc.len(), 1, "{by_hand_tc:?}");
    assert_ne!(by_hand_tc[0].2, fwc_qos::maps::PROG_NAME, "attached by hand: another filter name");
    assert_eq!(tc_filters(&ns, &foreign).len(), 1, "the foreign filter is there");

    let e = Expect {
        ns: ns.name.clone(),
        ours,
        root_kind: root_kind.into(),
        foreign,
        by_hand,
        bare,
        ours_filter: (ours_tc[0].0, ours_tc[0].1),
        by_hand_filter: (by_hand_tc[0].0, by_hand_tc[0].1),
    };
    check(&e);
    fwc_testkit::rerun_without_path("rtnl_links_root_qdisc_and_clsact_filters", &e.encode());
}
