//! The real program on a real veth: two namespaces, the program on the sender's egress, marks
//! set by a tiny nft rule in the sender namespace, iperf3 traffic. Rates are measured on the
//! receiver (its interface's rx_bytes over the steady part of the run; the sender's veth has
//! gso_max_segs 1 so every skb is one wire frame and rx_bytes counts wire bytes exactly).
//! TCP and UDP (fixed offered load) caps are measured; the update, restart and fallback tests
//! use UDP at twice the cap so the bucket is never idle and the window measurement is exact.
//! The tests share the two CPUs of the machine, so they run one at a time.

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::*;
use fwc_qos::{class_cfg, AttachMode, Qos};
use fwc_testkit::{veth, Netns};

static SERIAL: Mutex<()> = Mutex::new(());

const MBIT: u64 = 1_000_000 / 8;

struct Pair {
    // drop order: root (detach) first, then the namespaces
    root: PinRoot,
    s: Netns,
    // held so the receiving namespace lives as long as the pair
    _r: Netns,
    s_if: String,
    r_if: String,
    server_pid: u32,
}

fn setup(tag: &str) -> Option<(std::sync::MutexGuard<'static, ()>, Pair)> {
    if !fwc_testkit::privileged(tag) {
        return None;
    }
    if !fwc_testkit::which("iperf3") {
        if std::env::var("FWC_REQUIRE_PRIVILEGED").as_deref() == Ok("1") {
            panic!("{tag}: iperf3 missing");
        }
        eprintln!("SKIP {tag}: iperf3 not installed");
        return None;
    }
    let lock = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let s = Netns::new("s");
    let mut r = Netns::new("r");
    let (s_if, r_if) = veth(&s, &["198.18.5.1/24", "2001:db8:5::1/64"], &r, &["198.18.5.2/24", "2001:db8:5::2/64"]);
    s.exec(&["ip", "link", "set", "dev", &s_if, "gso_max_segs", "1"]);
    s.sh(
        "nft -f - <<'EOF'
table inet fwct {
  chain out {
    type filter hook output priority 0; policy accept;
    tcp dport { 5201, 5211 } meta mark set 0x10000
    udp dport { 5201, 5211 } meta mark set 0x10000
    tcp dport 5202 meta mark set 0x20000
  }
}
EOF",
    );
    let mut server_pid = 0;
    for port in ["5201", "5202", "5203", "5211"] {
        let mut c = r.cmd("iperf3");
        c.args(["-s", "-p", port]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        let child = c.spawn().expect("iperf3 server");
        if port == "5201" {
            server_pid = child.id();
        }
        r.adopt(child);
    }
    let t = Instant::now();
    while !r.sh("ss -ltn").contains(":5211") {
        assert!(t.elapsed() < Duration::from_secs(5), "iperf3 servers did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut root = PinRoot::new(tag);
    root.netns = Some(s.name.clone());
    Some((lock, Pair { root, s, _r: r, s_if, r_if, server_pid }))
}

impl Pair {
    /// Load, configure class `id` and attach, in the sender namespace.
    fn qos(&self, f: impl FnOnce(&mut Qos) + Send) -> Qos {
        in_netns(&self.s.name, || {
            let mut q = Qos::open(&self.root.path).expect("open");
            f(&mut q);
            assert_eq!(q.attach(&self.s_if).expect("attach"), AttachMode::Tcx);
            q
        })
    }

    /// Receiver interface rx_bytes, read through the iperf3 server's /proc (its netns).
    fn rx_bytes(&self) -> u64 {
        let dev = std::fs::read_to_string(format!("/proc/{}/net/dev", self.server_pid)).expect("net/dev");
        let line = dev.lines().find(|l| l.trim_start().starts_with(&format!("{}:", self.r_if))).expect("receiver if");
        line.split(':').nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap()
    }

    fn iperf(&self, args: &[&str]) -> Child {
        let mut c = self.s.cmd("iperf3");
        c.args(["-c", "198.18.5.2", "-J"]).args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
        c.spawn().expect("iperf3 client")
    }

    /// Receiver rate in bit/s over [from, to) seconds after now.
    fn rate_between(&self, start: Instant, from: f64, to: f64) -> f64 {
        sleep_until(start, from);
        let (b1, t1) = (self.rx_bytes(), Instant::now());
        sleep_until(start, to);
        let (b2, t2) = (self.rx_bytes(), Instant::now());
        (b2 - b1) as f64 * 8.0 / (t2 - t1).as_secs_f64()
    }
}

fn sleep_until(start: Instant, secs: f64) {
    let at = start + Duration::from_secs_f64(secs);
    let now = Instant::now();
    if at > now {
        std::thread::sleep(at - now);
    }
}

fn finish(c: Child) -> serde_json::Value {
    let out = c.wait_with_output().expect("iperf3");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    assert!(out.status.success(), "iperf3 failed: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    v
}

fn goodput(v: &serde_json::Value) -> f64 {
    v["end"]["sum_received"]["bits_per_second"].as_f64().or_else(|| v["end"]["sum"]["bits_per_second"].as_f64()).unwrap_or(0.0)
}

fn assert_cap(what: &str, measured: f64, target_bytes: u64) {
    let target = target_bytes as f64 * 8.0;
    let ratio = measured / target;
    eprintln!("{what}: {:.2} Mbit/s on the receiver, target {:.2} Mbit/s, ratio {ratio:.4}", measured / 1e6, target / 1e6);
    assert!((0.95..=1.02).contains(&ratio), "{what}: ratio {ratio:.4} outside 0.95..=1.02");
}

fn cap_run(tag: &str, rate: u64, udp: bool) {
    let Some((_l, p)) = setup(tag) else { return };
    let _q = p.qos(|q| q.set_class(1, &class_cfg(rate, (rate / 2).max(64 * 1024), false)).unwrap());
    let offered = format!("{}", rate * 8 * 2);
    // UDP: one stream at twice the cap. TCP: four streams (a policer leaves single-stream TCP
    // idle after losses; the bucket's credit then swings by up to a burst within the window).
    let args: Vec<&str> = if udp {
        vec!["-p", "5201", "-t", "6", "-u", "-b", &offered, "-l", "1400"]
    } else {
        vec!["-p", "5201", "-t", "10", "-P", "4"]
    };
    let start = Instant::now();
    let c = p.iperf(&args);
    let measured = if udp { p.rate_between(start, 1.5, 5.5) } else { p.rate_between(start, 1.5, 9.5) };
    let v = finish(c);
    if let Some(iv) = v["intervals"].as_array() {
        let r: Vec<String> = iv.iter().map(|i| format!("{:.2}", i["sum"]["bits_per_second"].as_f64().unwrap_or(0.0) / 1e6)).collect();
        eprintln!("{tag}: sender intervals {}", r.join(" "));
    }
    eprintln!("{tag}: iperf3 goodput {:.2} Mbit/s", goodput(&v) / 1e6);
    assert_cap(tag, measured, rate);
    let st = in_netns(&p.s.name, || Qos::open_pinned(&p.root.path).unwrap().stats(1).unwrap());
    assert!(st.dropped_pkts > 0 && st.passed_pkts > 0, "{st:?}");
}

#[test]
fn tcp_cap_10mbit() {
    cap_run("ns-tcp10", 10 * MBIT, false);
}

#[test]
fn tcp_cap_100mbit() {
    cap_run("ns-tcp100", 100 * MBIT, false);
}

#[test]
fn udp_cap_10mbit() {
    cap_run("ns-udp10", 10 * MBIT, true);
}

#[test]
fn udp_cap_100mbit() {
    cap_run("ns-udp100", 100 * MBIT, true);
}

#[test]
fn other_class_and_unmarked_traffic_are_not_limited() {
    let Some((_l, p)) = setup("ns-other") else { return };
    let _q = p.qos(|q| {
        q.set_class(1, &class_cfg(10 * MBIT, 5 * MBIT, false)).unwrap();
        q.set_class(2, &class_cfg(1000 * MBIT, 500 * MBIT, false)).unwrap();
    });
    // the capped elephant of class 1 keeps running while the others are measured
    let elephant = p.iperf(&["-p", "5201", "-t", "8"]);
    std::thread::sleep(Duration::from_millis(500));
    for (port, what) in [("5202", "class 2 (1 Gbit/s cap)"), ("5203", "unmarked")] {
        let v = finish(p.iperf(&["-p", port, "-t", "2"]));
        let g = goodput(&v);
        eprintln!("{what}: {:.1} Mbit/s next to a 10 Mbit/s class", g / 1e6);
        assert!(g > 100e6, "{what} got only {:.1} Mbit/s", g / 1e6);
    }
    let v = finish(elephant);
    eprintln!("class 1 elephant: {:.2} Mbit/s", goodput(&v) / 1e6);
    assert!(goodput(&v) < 11e6);
}

#[test]
fn rate_update_in_place_without_reattach() {
    let Some((_l, p)) = setup("ns-update") else { return };
    let q = p.qos(|q| q.set_class(1, &class_cfg(10 * MBIT, 5 * MBIT, false)).unwrap());
    let link = p.root.path.join("links").join(&p.s_if);
    let link_id = || fwc_qos::sys::link_info(&fwc_qos::sys::obj_get(&link).unwrap()).unwrap().id;
    let id0 = link_id();
    let start = Instant::now();
    let c = p.iperf(&["-p", "5201", "-t", "8", "-u", "-b", "40M", "-l", "1400"]);
    let before = p.rate_between(start, 1.0, 3.5);
    let mut q = q;
    q.set_class(1, &class_cfg(20 * MBIT, 10 * MBIT, false)).unwrap();
    let after = p.rate_between(start, 4.5, 7.5);
    finish(c);
    assert_cap("before the update (10 Mbit/s)", before, 10 * MBIT);
    assert_cap("after the update (20 Mbit/s)", after, 20 * MBIT);
    assert_eq!(link_id(), id0, "same TCX link: nothing was re-attached");
}

#[test]
fn loader_restart_keeps_the_pinned_state() {
    let Some((_l, p)) = setup("ns-restart") else { return };
    let q = p.qos(|q| q.set_class(1, &class_cfg(10 * MBIT, 5 * MBIT, false)).unwrap());
    let link = p.root.path.join("links").join(&p.s_if);
    let info = || fwc_qos::sys::link_info(&fwc_qos::sys::obj_get(&link).unwrap()).unwrap();
    let i0 = info();
    let start = Instant::now();
    let c = p.iperf(&["-p", "5201", "-t", "7", "-u", "-b", "20M", "-l", "1400"]);
    sleep_until(start, 2.0);
    drop(q); // the loader process goes away ...
    let q = in_netns(&p.s.name, || Qos::open(&p.root.path).expect("reopen")); // ... and comes back
    assert_eq!(in_netns(&p.s.name, || q.attached(&p.s_if)), Some(AttachMode::Tcx));
    let i1 = info();
    assert_eq!(i1.id, i0.id, "same link");
    assert_ne!(i1.prog_id, i0.prog_id, "the link now runs the newly loaded program");
    let measured = p.rate_between(start, 1.0, 6.0);
    finish(c);
    assert_cap("across a loader restart", measured, 10 * MBIT);
    assert_eq!(q.class(1).unwrap().rate, 10 * MBIT);
}

#[test]
fn clsact_fallback_and_detach() {
    let Some((_l, p)) = setup("ns-clsact") else { return };
    let q = in_netns(&p.s.name, || {
        let mut q = Qos::open(&p.root.path).unwrap();
        q.force_clsact = true;
        q.set_class(1, &class_cfg(10 * MBIT, 5 * MBIT, false)).unwrap();
        assert_eq!(q.attach(&p.s_if).unwrap(), AttachMode::Clsact);
        q
    });
    let prog_id = || {
        let out = Command::new("ip").args(["netns", "exec", &p.s.name, "tc", "-j", "filter", "show", "dev", &p.s_if, "egress"]).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let ids: Vec<u64> = v.as_array().unwrap().iter().filter_map(|f| f.pointer("/options/prog/id")?.as_u64()).collect();
        assert_eq!(ids.len(), 1, "exactly one filter: {v}");
        ids[0]
    };
    let id0 = prog_id();
    let start = Instant::now();
    let c = p.iperf(&["-p", "5201", "-t", "6", "-u", "-b", "20M", "-l", "1400"]);
    sleep_until(start, 1.0);
    // A loader restart replaces the filter's program in place (same priority and handle).
    drop(q);
    let mut q = in_netns(&p.s.name, || Qos::open(&p.root.path).expect("reopen"));
    assert_ne!(prog_id(), id0, "the clsact filter now runs the newly loaded program");
    let measured = p.rate_between(start, 1.5, 5.5);
    finish(c);
    assert_cap("clsact fallback, across a loader restart", measured, 10 * MBIT);
    in_netns(&p.s.name, || {
        assert_eq!(q.attached(&p.s_if), Some(AttachMode::Clsact));
        q.detach(&p.s_if).unwrap();
        assert_eq!(q.attached(&p.s_if), None);
    });
    let v = finish(p.iperf(&["-p", "5201", "-t", "2"]));
    assert!(goodput(&v) > 100e6, "unshaped after detach: {:.1} Mbit/s", goodput(&v) / 1e6);
    let _ = Command::new("true").status();
}
