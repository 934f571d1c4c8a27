//! The QoS backend through the `Backend` trait, in a network namespace: prepare (validate,
//! resolve, load), commit (maps + attach), observe (in sync, counters), an in-place update,
//! drift when a class is removed behind its back, and rollback to nothing.

use std::collections::BTreeMap;

use fwc_compiler::artifacts::{Artifacts, ForwardArtifact, Manifest, QosArtifact, QosClass, QosDirection, QOS_MARK_MASK};
use fwc_compiler::model::RuleKind;
use fwc_runtime::backend::qos::QosBackend;
use fwc_runtime::backend::Backend;
use fwc_testkit::{veth, Netns};

fn artifacts(classes: Vec<QosClass>) -> Artifacts {
    Artifacts {
        nftables: serde_json::json!({"nftables": []}).into(),
        qos: QosArtifact { version: 1, mark_mask: QOS_MARK_MASK, classes },
        forward: ForwardArtifact::default(),
        manifest: Manifest { version: 1, host: "t".into(), commit: None, rules: vec![], artifact_hashes: BTreeMap::new(), setup: Default::default(), valid_until: None },
    }
}

fn class(id: u32, rule: &str, rate: u64, ifname: &str) -> QosClass {
    QosClass {
        id,
        mark: id << 16,
        kind: RuleKind::Shape,
        rule: rule.into(),
        direction: if id.is_multiple_of(2) { QosDirection::Up } else { QosDirection::Down },
        rate_bytes_per_sec: rate,
        burst_bytes: (rate / 2).max(65536),
        interfaces: vec![ifname.into()],
    }
}

fn in_netns<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> T {
    use std::os::fd::AsRawFd;
    std::thread::scope(|s| {
        s.spawn(|| {
            let ns = std::fs::File::open(format!("/run/netns/{name}")).unwrap();
            assert_eq!(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) }, 0);
            f()
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

struct Pins(std::path::PathBuf, String);
impl Drop for Pins {
    fn drop(&mut self) {
        let (p, ns) = (self.0.clone(), self.1.clone());
        let _ = std::thread::spawn(move || in_netns(&ns, || fwc_qos::detach_all(&p))).join();
    }
}

#[test]
fn qos_backend_prepare_commit_observe_rollback() {
    if !fwc_testkit::privileged("qos_backend_prepare_commit_observe_rollback") {
        return;
    }
    let s = Netns::new("q");
    let r = Netns::new("r");
    let (s_if, _) = veth(&s, &["198.18.6.1/24"], &r, &["198.18.6.2/24"]);
    let root = std::path::PathBuf::from(format!("/sys/fs/bpf/fwc-t-backend-{}", std::process::id()));
    let _pins = Pins(root.clone(), s.name.clone());
    in_netns(&s.name, || {
        let mut b = QosBackend::new(&root);
        // a class on a missing interface is refused in prepare, before anything is loaded
        let bad = artifacts(vec![class(2, "guests", 1_250_000, "nosuchif0")]);
        let e = b.prepare(&bad).unwrap_err();
        assert!(format!("{e}").contains("nosuchif0"), "{e}");
        assert!(!root.join("fwc_qos_cfg").exists());

        let a1 = artifacts(vec![class(2, "guests", 1_250_000, &s_if), class(3, "guests", 2_500_000, &s_if)]);
        b.prepare(&a1).unwrap();
        b.commit().unwrap();
        let o = b.observe(&a1).unwrap();
        assert!(o.in_sync(), "{:?}", o.drift);
        assert_eq!(o.counters.len(), 1, "one counter per rule");
        let q = fwc_qos::Qos::open_pinned(&root).unwrap();
        assert_eq!(q.attached(&s_if), Some(fwc_qos::AttachMode::Tcx));
        assert_eq!(q.class(2).unwrap().rate, 1_250_000);

        // traffic of class 2 is counted for rule "guests"
        s.sh("nft add table inet t; nft add chain inet t o '{ type filter hook output priority 0; }'; nft add rule inet t o meta mark set 0x20000");
        let u = std::net::UdpSocket::bind("198.18.6.1:0").unwrap(); // this thread is in the namespace
        for _ in 0..3 {
            u.send_to(b"x", "198.18.6.2:9").unwrap();
        }
        let o = b.observe(&a1).unwrap();
        assert!(o.counters[0].packets >= 3, "{:?}", o.counters);
        // Per class and action, for fwc_qos_packets_total{class,action}.
        assert!(o.qos_packets.iter().any(|q| q.action == "passed" && q.packets >= 3), "{:?}", o.qos_packets);
        assert!(o.qos_packets.iter().all(|q| q.class.ends_with("/up") || q.class.ends_with("/down")), "{:?}", o.qos_packets);

        // update in place: class 2 faster, class 3 gone
        let a2 = artifacts(vec![class(2, "guests", 12_500_000, &s_if)]);
        let gen = q.class(2).unwrap().gen;
        b.prepare(&a2).unwrap();
        b.commit().unwrap();
        assert_eq!(q.class(2).unwrap().rate, 12_500_000);
        assert_eq!(q.class(2).unwrap().gen, gen, "updated in place");
        assert_eq!(q.class(3).unwrap().rate, 0);
        assert!(b.observe(&a2).unwrap().in_sync());

        // drift: a class removed behind fwc's back is reported
        let mut q2 = fwc_qos::Qos::open(&root).unwrap();
        q2.remove_class(2).unwrap();
        let o = b.observe(&a2).unwrap();
        assert!(o.drift.iter().any(|d| d.contains("class 2")), "{:?}", o.drift);

        // rollback to a1 restores both classes; no classes at all detaches
        b.rollback(Some(&a1)).unwrap();
        assert!(b.observe(&a1).unwrap().in_sync());
        let empty = artifacts(vec![]);
        b.prepare(&empty).unwrap();
        b.commit().unwrap();
        assert_eq!(q.attached(&s_if), None, "detached where no class remains");
        b.rollback(None).unwrap();
        assert!(!root.exists(), "rollback without previous artifacts removes the pins");
    });
}

/// The interfaces a class without `interfaces` shapes are the links that are up (loopback
/// aside), found through route netlink: also without iproute2 on PATH, where the old
/// `ip -j link show up` shell-out found none and prepare refused every such class.
#[test]
fn plan_resolves_the_up_links_without_iproute2() {
    const NAME: &str = "plan_resolves_the_up_links_without_iproute2";
    let check = |arg: &str| {
        let (ns, up_if) = arg.split_once(',').unwrap();
        in_netns(ns, || {
            let mut up = vec!["lo".to_string(), up_if.to_string()];
            up.sort();
            assert_eq!(fwc_runtime::backend::qos::up_interfaces().unwrap(), up);
            let mut c = class(1, "everywhere", 1_250_000, "unused");
            c.interfaces.clear();
            let p = fwc_runtime::backend::qos::plan(&artifacts(vec![c]).qos).unwrap();
            assert_eq!(p.classes[0].interfaces, vec![up_if.to_string()], "exactly the up links besides lo");
            assert_eq!(p.classes[0].cfg.flags & fwc_qos::maps::F_EDT, 0, "no fq root qdisc: no EDT pacing");
        });
    };
    if let Some(arg) = fwc_testkit::rerun_arg() {
        return check(&arg);
    }
    if !fwc_testkit::privileged(NAME) {
        return;
    }
    let s = Netns::new("q");
    let r = Netns::new("r");
    let (s_if, _) = veth(&s, &["198.18.7.1/24"], &r, &["198.18.7.2/24"]);
    // a pair that stays down
    let (d1, d2) = (fwc_testkit::unique_name("d"), fwc_testkit::unique_name("e"));
    s.exec(&["ip", "link", "add", &d1, "type", "veth", "peer", "name", &d2]);
    let arg = format!("{},{s_if}", s.name);
    check(&arg);
    fwc_testkit::rerun_without_path(NAME, &arg);
}
