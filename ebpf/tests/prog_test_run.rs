//! The program's decisions, run through BPF_PROG_TEST_RUN with `skb->mark` and `wire_len` set
//! through ctx_in: deterministic, no network. Rates are tiny (1 byte/s) so the bucket does not
//! refill measurably while a test runs.

mod common;

use common::*;
use fwc_qos::maps::{F_ECN, F_EDT, F_FASTPASS};
use fwc_qos::{ClassCfg, Qos, TC_ACT_OK, TC_ACT_SHOT};

fn open(tag: &str) -> Option<(PinRoot, Qos)> {
    if !fwc_testkit::privileged(tag) {
        return None;
    }
    let root = PinRoot::new(tag);
    let q = Qos::open(&root.path).expect("load the QoS program");
    Some((root, q))
}

fn cfg(rate: u64, burst: u64, flags: u32) -> ClassCfg {
    ClassCfg { rate, burst, ecn_debt: 0, fp_budget: 0, fp_rate: 0, horizon: 0, flags, gen: 0 }
}

fn run(q: &mut Qos, mark: u32, wire: u32, pkt: &[u8]) -> i32 {
    q.test_run(mark, wire, pkt).expect("test run").verdict
}

#[test]
fn pass_within_burst_then_drop_after_one_packet_of_debt() {
    let Some((_root, mut q)) = open("tr-pass") else { return };
    q.set_class(1, &cfg(1, 3000, 0)).unwrap();
    let p = ipv4(1000, true, 0, 1000, 80);
    // 3000 bytes of credit: 3000 -> 2000 -> 1000 -> 0 -> -1000 (debt of one packet) -> drop.
    let v: Vec<i32> = (0..6).map(|_| run(&mut q, MARK1, 1000, &p)).collect();
    assert_eq!(v, [TC_ACT_OK, TC_ACT_OK, TC_ACT_OK, TC_ACT_OK, TC_ACT_SHOT, TC_ACT_SHOT]);
    let st = q.class_state(1).unwrap();
    assert!((-1000..=-990).contains(&st.credit), "credit {}", st.credit);
    let s = q.stats(1).unwrap();
    assert_eq!((s.passed_pkts, s.passed_bytes, s.dropped_pkts, s.dropped_bytes), (4, 4000, 2, 2000));
    assert_eq!((s.ecn_pkts, s.paced_pkts, s.fast_pkts), (0, 0, 0));
}

#[test]
fn charges_wire_len_not_skb_len() {
    let Some((_root, mut q)) = open("tr-wire") else { return };
    q.set_class(1, &cfg(1, 10_000, 0)).unwrap();
    let p = ipv4(100, true, 0, 1000, 80);
    assert_eq!(run(&mut q, MARK1, 6000, &p), TC_ACT_OK); // a GSO packet of 6000 wire bytes
    assert_eq!(run(&mut q, MARK1, 6000, &p), TC_ACT_OK); // 4000 -> -2000
    assert_eq!(run(&mut q, MARK1, 100, &p), TC_ACT_SHOT);
    assert_eq!(q.stats(1).unwrap().passed_bytes, 12_000);
}

#[test]
fn unmarked_other_class_and_foreign_mark_bits() {
    let Some((_root, mut q)) = open("tr-other") else { return };
    q.set_class(1, &cfg(1, 3000, 0)).unwrap();
    let p = ipv4(1000, false, 0, 5000, 53);
    for _ in 0..5 {
        run(&mut q, MARK1, 1000, &p);
    }
    assert_eq!(run(&mut q, MARK1, 1000, &p), TC_ACT_SHOT, "class 1 is exhausted");
    // no class, an unconfigured class, and bits outside the mask all leave class 1 alone
    for _ in 0..10 {
        assert_eq!(run(&mut q, 0, 1000, &p), TC_ACT_OK);
        assert_eq!(run(&mut q, MARK2, 1000, &p), TC_ACT_OK);
        assert_eq!(run(&mut q, 0xf000_00ff, 1000, &p), TC_ACT_OK);
    }
    // a mark with extra bits outside the mask still belongs to class 1
    assert_eq!(run(&mut q, MARK1 | 0xf000_0001, 1000, &p), TC_ACT_SHOT);
    assert_eq!(q.stats(0).unwrap().passed_pkts, 20);
    assert_eq!(q.stats(2).unwrap().passed_pkts, 10);
    // a different mask moves the class bits (coexistence with other users of the mark)
    q.set_mark_mask(0xff).unwrap();
    assert_eq!(run(&mut q, MARK1, 1000, &p), TC_ACT_OK, "no class under mask 0xff");
    assert_eq!(run(&mut q, 0x1, 1000, &p), TC_ACT_SHOT, "class 1 under mask 0xff");
}

#[test]
fn ecn_marks_ect_tcp_while_debt_is_small_then_drops() {
    let Some((_root, mut q)) = open("tr-ecn") else { return };
    let mut c = cfg(1, 3000, F_ECN);
    c.ecn_debt = 2500;
    q.set_class(1, &c).unwrap();
    let ect = ipv4(1000, true, 0b10, 1000, 80);
    for _ in 0..4 {
        assert_eq!(run(&mut q, MARK1, 1000, &ect), TC_ACT_OK);
    }
    // credit -1000: over rate. Non-ECT TCP and ECT UDP are dropped, ECT TCP is CE-marked.
    assert_eq!(run(&mut q, MARK1, 1000, &ipv4(1000, true, 0, 1000, 80)), TC_ACT_SHOT);
    assert_eq!(run(&mut q, MARK1, 1000, &ipv4(1000, false, 0b01, 1000, 80)), TC_ACT_SHOT);
    let out = q.test_run(MARK1, 1000, &ect).unwrap();
    assert_eq!(out.verdict, TC_ACT_OK);
    assert_eq!(out.packet[15] & 3, 3, "CE set");
    assert_ne!(out.packet[24..26], ect[24..26], "IPv4 checksum updated");
    // debt 2000 < 2500: marked once more; debt 3000: dropped
    let out = q.test_run(MARK1, 1000, &ect).unwrap();
    assert_eq!((out.verdict, out.packet[15] & 3), (TC_ACT_OK, 3));
    assert_eq!(run(&mut q, MARK1, 1000, &ect), TC_ACT_SHOT);
    let s = q.stats(1).unwrap();
    assert_eq!((s.passed_pkts, s.ecn_pkts, s.dropped_pkts), (6, 2, 3));
}

#[test]
fn ecn_marks_ipv6() {
    let Some((_root, mut q)) = open("tr-ecn6") else { return };
    let mut c = cfg(1, 1000, F_ECN);
    c.ecn_debt = 10_000;
    q.set_class(1, &c).unwrap();
    let p = ipv6_tcp(1000, 0b01, 1000, 80);
    assert_eq!(run(&mut q, MARK1, 1000, &p), TC_ACT_OK); // 1000 -> 0
    assert_eq!(run(&mut q, MARK1, 1000, &p), TC_ACT_OK); // 0 -> -1000
    let out = q.test_run(MARK1, 1000, &p).unwrap();
    assert_eq!(out.verdict, TC_ACT_OK);
    assert_eq!((out.packet[15] >> 4) & 3, 3, "CE in the IPv6 traffic class");
    assert_eq!(q.stats(1).unwrap().ecn_pkts, 1);
}

#[test]
fn debt_is_repaid_and_rate_updates_in_place() {
    let Some((_root, mut q)) = open("tr-debt") else { return };
    q.set_class(1, &cfg(1, 3000, 0)).unwrap();
    let gen = q.class(1).unwrap().gen;
    let p = ipv4(1000, true, 0, 1000, 80);
    for _ in 0..5 {
        run(&mut q, MARK1, 1000, &p);
    }
    assert!(q.class_state(1).unwrap().credit < 0);
    // in place: same generation, the debt carries over
    q.set_class(1, &cfg(1_000_000, 3000, 0)).unwrap();
    assert_eq!(q.class(1).unwrap().gen, gen);
    std::thread::sleep(std::time::Duration::from_millis(5)); // earns >= 5000 bytes, capped at burst
    assert_eq!(run(&mut q, MARK1, 1000, &p), TC_ACT_OK);
    let st = q.class_state(1).unwrap();
    assert_eq!(st.credit, 2000, "refilled to the burst, then charged");
    // removing and re-adding a class starts a new generation with a full bucket
    q.remove_class(1).unwrap();
    assert_eq!(run(&mut q, MARK1, 60_000, &ipv4(1000, true, 0, 1, 2)), TC_ACT_OK, "no class: pass");
    q.set_class(1, &cfg(1, 3000, 0)).unwrap();
    assert_ne!(q.class(1).unwrap().gen, gen);
    assert_eq!(run(&mut q, MARK1, 1000, &p), TC_ACT_OK);
    assert_eq!(q.class_state(1).unwrap().credit, 2000);
}

/// An elephant (5201) spends the class bucket (40 kB, no refill) into 20 kB of debt and is then
/// dropped; returns the short flow's packet for the caller.
fn elephant_into_debt(q: &mut Qos, c: &ClassCfg) -> Vec<u8> {
    let mut g = q.glob().unwrap();
    g.fp_threshold = 20_000;
    g.fp_window_shift = 34; // 17 s windows: no decay during the test
    q.set_glob(&g).unwrap();
    q.set_class(1, c).unwrap();
    let elephant = ipv4(1000, true, 0, 40000, 5201);
    // the elephant's GSO packets: 40000 -> 20000 -> 0 -> -20000, then it is long: dropped
    for _ in 0..3 {
        assert_eq!(run(q, MARK1, 20_000, &elephant), TC_ACT_OK);
    }
    for _ in 0..5 {
        assert_eq!(run(q, MARK1, 20_000, &elephant), TC_ACT_SHOT);
    }
    ipv4(1000, true, 0, 40001, 80)
}

#[test]
fn fast_pass_lets_short_flows_through_from_its_own_bucket() {
    let Some((_root, mut q)) = open("tr-fast") else { return };
    let mut c = cfg(1, 40_000, F_FASTPASS);
    c.fp_budget = 10_000; // fp_rate 0: no refill during the test
    let short = elephant_into_debt(&mut q, &c);
    // a short flow in the same class gets through while the fast-pass bucket has credit
    let v: Vec<i32> = (0..12).map(|_| run(&mut q, MARK1, 1000, &short)).collect();
    assert_eq!(&v[..10], &[TC_ACT_OK; 10], "fast-pass bucket 10000 -> 0");
    assert_eq!(&v[10..], &[TC_ACT_SHOT; 2], "fast-pass bucket spent");
    let s = q.stats(1).unwrap();
    assert_eq!((s.fast_pkts, s.fast_bytes), (10, 10_000));
    let st = q.class_state(1).unwrap();
    assert_eq!(st.credit, -30_000, "fast-pass bytes are charged to the class too");
    assert_eq!(st.fp_credit, 0);
    // without the flag the same short flow is dropped
    c.flags = 0;
    q.set_class(1, &c).unwrap();
    assert_eq!(run(&mut q, MARK1, 1000, &ipv4(1000, true, 0, 40002, 80)), TC_ACT_SHOT);
}

#[test]
fn fast_pass_never_pushes_the_class_debt_past_one_burst() {
    let Some((_root, mut q)) = open("tr-fastcap") else { return };
    let mut c = cfg(1, 40_000, F_FASTPASS);
    c.fp_budget = 1_000_000;
    let short = elephant_into_debt(&mut q, &c);
    let v: Vec<i32> = (0..22).map(|_| run(&mut q, MARK1, 1000, &short)).collect();
    assert_eq!(&v[..20], &[TC_ACT_OK; 20], "debt 20000 -> 40000");
    assert_eq!(&v[20..], &[TC_ACT_SHOT; 2], "debt reached the burst");
    assert_eq!(q.class_state(1).unwrap().credit, -40_000);
}

#[test]
fn fast_pass_bucket_refills_at_its_own_rate() {
    let Some((_root, mut q)) = open("tr-fastrate") else { return };
    // class: 1 MB/s; fast pass: 1 kB/s (1 byte per ms), 2 kB deep
    let mut c = cfg(1_000_000, 40_000, F_FASTPASS);
    c.fp_budget = 2_000;
    c.fp_rate = 1_000;
    let short = elephant_into_debt(&mut q, &c);
    assert_eq!(run(&mut q, MARK1, 1000, &short), TC_ACT_OK);
    assert_eq!(run(&mut q, MARK1, 1000, &short), TC_ACT_OK);
    assert_eq!(run(&mut q, MARK1, 1000, &short), TC_ACT_SHOT, "fast-pass bucket empty");
    // 5 ms earn the fast pass ~5 bytes (> 0: one packet may pass into fast-pass debt) while
    // the class, at 1 MB/s, is still ~17 kB in debt.
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_eq!(run(&mut q, MARK1, 1000, &short), TC_ACT_OK);
    assert_eq!(run(&mut q, MARK1, 1000, &short), TC_ACT_SHOT, "fast-pass bucket in debt");
    let st = q.class_state(1).unwrap();
    assert!(st.credit < 0 && st.fp_credit < 0, "{st:?}");
    assert_eq!(q.stats(1).unwrap().fast_pkts, 3);
}

#[test]
fn edt_stamps_departure_time_and_drops_past_the_horizon() {
    let Some((_root, mut q)) = open("tr-edt") else { return };
    let mut c = cfg(1000, 3000, F_EDT | F_ECN);
    c.horizon = 3000;
    c.ecn_debt = 1_000_000;
    q.set_class(1, &c).unwrap();
    let p = ipv4(1000, true, 0b10, 1000, 80);
    for _ in 0..4 {
        let o = q.test_run(MARK1, 1000, &p).unwrap();
        assert_eq!((o.verdict, o.tstamp), (TC_ACT_OK, 0));
    }
    // credit ~-1000 at 1000 bytes/s: leave ~1 s from now; EDT wins over ECN (no CE mark)
    let now = fwc_qos::sys::monotonic_ns();
    let o = q.test_run(MARK1, 1000, &p).unwrap();
    assert_eq!(o.verdict, TC_ACT_OK);
    assert_eq!(o.packet[15] & 3, 0b10, "paced, not marked");
    let ahead = o.tstamp.saturating_sub(now);
    assert!((900_000_000..1_100_000_000).contains(&ahead), "tstamp {ahead} ns ahead");
    let o = q.test_run(MARK1, 1000, &p).unwrap();
    assert!(o.tstamp.saturating_sub(now) > 1_900_000_000, "debt grows, so does the delay");
    // debt ~3000 >= horizon: drop
    run(&mut q, MARK1, 1000, &p);
    assert_eq!(run(&mut q, MARK1, 1000, &p), TC_ACT_SHOT);
    let s = q.stats(1).unwrap();
    assert!(s.paced_pkts >= 2 && s.dropped_pkts >= 1, "{s:?}");
}

#[test]
fn restart_adopts_pinned_state() {
    let Some((root, mut q)) = open("tr-restart") else { return };
    q.set_class(7, &cfg(1, 3000, 0)).unwrap();
    let p = ipv4(1000, true, 0, 1000, 80);
    for _ in 0..5 {
        run(&mut q, MARK1 * 7, 1000, &p);
    }
    let before = (q.class(7).unwrap(), q.class_state(7).unwrap(), q.stats(7).unwrap());
    drop(q);
    let mut q = Qos::open(&root.path).expect("reopen");
    assert_eq!(q.class(7).unwrap(), before.0);
    assert_eq!(q.class_state(7).unwrap().credit, before.1.credit);
    assert_eq!(q.stats(7).unwrap(), before.2);
    assert_eq!(run(&mut q, MARK1 * 7, 1000, &p), TC_ACT_SHOT, "still in debt after the restart");
    let ro = Qos::open_pinned(&root.path).unwrap();
    assert_eq!(ro.stats(7).unwrap().dropped_pkts, 2);
}

#[test]
fn incompatible_pins_are_refused() {
    if !fwc_testkit::privileged("tr-compat") {
        return;
    }
    let root = PinRoot::new("tr-compat");
    fwc_qos::ensure_pin_root(&root.path).unwrap();
    // a map of the right name but another layout, as an older fwc might have left
    let st = std::process::Command::new("bpftool")
        .args(["map", "create"])
        .arg(root.path.join("fwc_qos_cfg"))
        .args(["type", "array", "key", "4", "value", "8", "entries", "4", "name", "fwc_qos_cfg"])
        .status();
    if !matches!(st, Ok(s) if s.success()) {
        eprintln!("SKIP incompatible_pins_are_refused: bpftool map create failed");
        return;
    }
    let e = Qos::open(&root.path).err().expect("refused");
    assert!(e.to_string().contains("fwc qos detach"), "{e}");
}
