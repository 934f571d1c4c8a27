//! Kernel forwards to DNS names: one task per forward resolves the name (hosts file, then
//! DNS, TTLs within `resolve::MIN_TTL`..`MAX_TTL`) and, when the addresses change, replaces the
//! one rule of the forward's DNAT chain in `table inet fwc` in one nft transaction. A name that
//! does not resolve is a health failure (status and `fwc_forward_target_up`), never an error
//! of the apply; the last addresses installed stay (stale answers beat none).

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fwc_artifacts::{rule_comment, ForwardTarget, HealthCheck, KernelDns, ListenerProto, RuleKind, NFT_TABLE};
use serde_json::{json, Value};
use tokio::task::JoinHandle;

use crate::health::Health;
use crate::resolve::{Resolver, MIN_TTL};

/// What a name resolves to changes health at once (one answer is one probe).
const AT_ONCE: HealthCheck = HealthCheck { interval_ms: 0, timeout_ms: 0, rise: 1, fall: 1 };

/// The addresses installed in a forward's chain (`None`: nothing installed yet). The lock is
/// held while nft runs, so the task and a re-install after an apply never interleave.
pub type Installed = Arc<Mutex<Option<Vec<IpAddr>>>>;

/// The target as status lists it: `name:port` (`name` alone when the port is kept).
pub fn target(kd: &KernelDns) -> ForwardTarget {
    ForwardTarget { host: kd.name.clone(), port: kd.port.unwrap_or(0) }
}

/// The nft batch that points `kd`'s chain at `addrs` (of its family, non-empty): flush the
/// chain, add `meta l4proto P dnat ip[6] to ADDR[:port]`, with a `numgen inc` map over
/// several addresses.
pub fn batch(kd: &KernelDns, addrs: &[IpAddr]) -> Value {
    let chain = json!({"family": "inet", "table": NFT_TABLE, "name": kd.chain});
    let protos: Vec<&str> = kd.protos.iter().map(|p| if *p == ListenerProto::Tcp { "tcp" } else { "udp" }).collect();
    let proto = if let [p] = protos[..] { json!(p) } else { json!({"set": protos}) };
    let family = if kd.family == 6 { "ip6" } else { "ip" };
    let one = |a: &IpAddr| match kd.port {
        Some(p) if addrs.len() > 1 => json!({"concat": [a.to_string(), p]}),
        _ => json!(a.to_string()),
    };
    let mut nat = serde_json::Map::new();
    if let [a] = addrs {
        nat.insert("addr".into(), one(a));
        if let Some(p) = kd.port {
            nat.insert("port".into(), json!(p));
        }
    } else {
        let elems: Vec<Value> = addrs.iter().enumerate().map(|(i, a)| json!([i, one(a)])).collect();
        nat.insert("addr".into(), json!({"map": {"key": {"numgen": {"mode": "inc", "mod": addrs.len(), "offset": 0}}, "data": {"set": elems}}}));
    }
    nat.insert("family".into(), json!(family));
    json!({"nftables": [
        {"flush": {"chain": chain}},
        {"add": {"rule": {
            "family": "inet", "table": NFT_TABLE, "chain": kd.chain, "comment": rule_comment(RuleKind::Forward, &kd.rule),
            "expr": [
                {"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": proto}},
                {"dnat": nat}
            ]
        }}}
    ]})
}

/// The addresses of `all` that `kd` can use (its family; not loopback, which a remote client's
/// DNAT cannot reach without `route_localnet`), sorted so that a name server that rotates its
/// answers does not cause rewrites.
pub fn usable(kd: &KernelDns, all: &[IpAddr]) -> Vec<IpAddr> {
    let mut v: Vec<IpAddr> = all.iter().copied().filter(|a| a.is_ipv6() == (kd.family == 6) && !a.is_loopback()).collect();
    v.sort();
    v.dedup();
    v
}

/// Install `addrs` unless they are installed already (`force`: again anyway, after an apply
/// reset the chain). Blocking.
fn install(kd: &KernelDns, installed: &Installed, addrs: Option<Vec<IpAddr>>, force: bool) -> Result<bool, String> {
    let mut cur = installed.lock().unwrap();
    let want = match addrs {
        Some(a) => a,
        None => match cur.clone() {
            Some(a) => a,
            None => return Ok(false),
        },
    };
    if !force && cur.as_ref() == Some(&want) {
        return Ok(false);
    }
    crate::kernel::run_nft(&batch(kd, &want))?;
    *cur = Some(want);
    Ok(true)
}

/// Install the addresses known now again (an nft apply emptied the chain). Off the async threads.
pub fn spawn_reinstall(kd: KernelDns, installed: Installed) {
    tokio::task::spawn_blocking(move || {
        if let Err(e) = install(&kd, &installed, None, true) {
            tracing::error!(rule = %kd.rule, "cannot install the addresses of {} again: {e}", kd.name);
        }
    });
}

/// Resolve `kd.name` forever (until aborted): install changed addresses, record health.
pub fn spawn(kd: KernelDns, health: Arc<Health>, resolver: Arc<Resolver>, installed: Installed) -> JoinHandle<()> {
    tokio::spawn(async move {
        let t = target(&kd);
        loop {
            let wait = match resolver.dns().lookup(&kd.name).await {
                Ok(a) => {
                    let addrs = usable(&kd, &a.addrs);
                    if addrs.is_empty() {
                        let fam = if kd.family == 6 { "AAAA" } else { "A" };
                        tracing::warn!(rule = %kd.rule, "{} has no usable {fam} record, loopback excluded ({} answered {:?})", kd.name, a.source, a.addrs);
                        health.record(&kd.rule, &t, false, &AT_ONCE);
                        MIN_TTL
                    } else {
                        let (k, i, list) = (kd.clone(), installed.clone(), addrs.clone());
                        match tokio::task::spawn_blocking(move || install(&k, &i, Some(list), false)).await {
                            Ok(Ok(changed)) => {
                                if changed {
                                    tracing::info!(rule = %kd.rule, "kernel DNAT of {} now to {addrs:?} (ttl {:?}, {})", kd.name, a.ttl, a.source);
                                }
                                health.set_addresses(&t, &addrs);
                                health.record(&kd.rule, &t, true, &AT_ONCE);
                                a.ttl
                            }
                            Ok(Err(e)) => {
                                tracing::error!(rule = %kd.rule, "cannot install the addresses of {}: {e}", kd.name);
                                MIN_TTL
                            }
                            Err(e) => {
                                tracing::error!(rule = %kd.rule, "install task failed: {e}");
                                MIN_TTL
                            }
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(rule = %kd.rule, "{e}");
                    health.record(&kd.rule, &t, false, &AT_ONCE);
                    MIN_TTL
                }
            };
            tokio::time::sleep(wait.max(Duration::from_millis(100))).await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kd(port: Option<u16>, protos: Vec<ListenerProto>) -> KernelDns {
        KernelDns { rule: "api".into(), name: "api.internal".into(), family: 4, chain: "fdn4_api".into(), protos, port }
    }

    #[test]
    fn one_address_is_a_plain_dnat_several_a_numgen_map() {
        let a: Vec<IpAddr> = vec!["198.18.2.2".parse().unwrap(), "198.18.2.3".parse().unwrap()];
        let b = batch(&kd(Some(8443), vec![ListenerProto::Tcp]), &a[..1]);
        assert_eq!(b["nftables"][0], json!({"flush": {"chain": {"family": "inet", "table": "fwc", "name": "fdn4_api"}}}));
        let r = &b["nftables"][1]["add"]["rule"];
        assert_eq!(r["comment"], "fwc:forward:api");
        assert_eq!(r["expr"][0]["match"]["right"], "tcp");
        assert_eq!(r["expr"][1], json!({"dnat": {"addr": "198.18.2.2", "port": 8443, "family": "ip"}}));
        let b = batch(&kd(None, vec![ListenerProto::Tcp, ListenerProto::Udp]), &a);
        let r = &b["nftables"][1]["add"]["rule"];
        assert_eq!(r["expr"][0]["match"]["right"], json!({"set": ["tcp", "udp"]}));
        assert_eq!(r["expr"][1]["dnat"]["addr"]["map"]["data"]["set"], json!([[0, "198.18.2.2"], [1, "198.18.2.3"]]));
        let b = batch(&kd(Some(80), vec![ListenerProto::Tcp]), &a);
        assert_eq!(b["nftables"][1]["add"]["rule"]["expr"][1]["dnat"]["addr"]["map"]["data"]["set"][1], json!([1, {"concat": ["198.18.2.3", 80]}]));
    }

    #[test]
    fn usable_addresses_are_of_the_family_sorted_once() {
        let all: Vec<IpAddr> = ["198.18.2.9", "2001:db8::1", "127.0.1.1", "198.18.2.2", "198.18.2.9"].iter().map(|a| a.parse().unwrap()).collect();
        assert_eq!(usable(&kd(None, vec![]), &all), vec!["198.18.2.2".parse::<IpAddr>().unwrap(), "198.18.2.9".parse().unwrap()]);
    }
}
