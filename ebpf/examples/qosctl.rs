//! Minimal driver of the QoS loader for benchmarks and manual tests (bench/qos/run.sh):
//!   qosctl PIN_DIR attach IFNAME CLASS RATE_BYTES_PER_SEC BURST_BYTES [nofastpass]
//!   qosctl PIN_DIR stats CLASS        (JSON counters)
//!   qosctl PIN_DIR detach
//! Run it inside the namespace of the interface (`ip netns exec NS qosctl ...`).

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let usage = "usage: qosctl PIN_DIR attach IF CLASS RATE BURST [nofastpass] | stats CLASS | detach";
    if a.len() < 3 {
        eprintln!("{usage}");
        std::process::exit(2);
    }
    let root = &a[1];
    let r = match a[2].as_str() {
        "attach" if a.len() >= 7 => (|| {
            let mut q = fwc_qos::Qos::open(root)?;
            let (id, rate, burst): (u32, u64, u64) = (a[4].parse().unwrap(), a[5].parse().unwrap(), a[6].parse().unwrap());
            let mut c = fwc_qos::class_cfg(rate, burst, fwc_qos::root_qdisc_is_fq(&a[3])?);
            if a.get(7).map(String::as_str) == Some("nofastpass") {
                c.flags &= !fwc_qos::maps::F_FASTPASS;
            }
            q.set_class(id, &c)?;
            let m = q.attach(&a[3])?;
            println!("attached to {} ({m:?}), class {id}: {c:?}", a[3]);
            Ok(())
        })(),
        "stats" if a.len() >= 4 => (|| {
            let q = fwc_qos::Qos::open_pinned(root)?;
            let s = q.stats(a[3].parse().unwrap())?;
            println!("{}", serde_json::to_string(&s).unwrap());
            Ok(())
        })(),
        "detach" => fwc_qos::detach_all(root),
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    if let Err(e) = r {
        eprintln!("qosctl: {e}");
        std::process::exit(1);
    }
}
