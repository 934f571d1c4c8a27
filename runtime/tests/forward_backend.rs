//! The forwarder backend against a real forwarder (in this process, control socket in a temp
//! state dir): no forwarder -> prepare explains how to start one; prepare/commit/observe;
//! rollback after commit restores the previous listeners; a bind conflict fails prepare.

use std::collections::BTreeMap;
use std::time::Duration;

use fwc_compiler::artifacts::{
    Artifacts, ForwardArtifact, ForwardTarget, Listener, ListenerProto, Manifest, QosArtifact,
};
use fwc_runtime::backend::forward::ForwardBackend;
use fwc_runtime::backend::Backend;

fn listener(rule: &str, port: u16) -> Listener {
    Listener {
        rule: rule.into(),
        proto: ListenerProto::Tcp,
        listen_addr: "127.0.0.1".into(),
        listen_port: port,
        targets: vec![ForwardTarget { host: "127.0.0.1".into(), port: 9 }],
        allow_from: vec![],
        up_bytes_per_sec: None,
        down_bytes_per_sec: None,
        burst_bytes: None,
        max_conns: None,
        conn_rate: None,
        proxy_protocol: None,
        idle_timeout_ms: 60_000,
        connect_timeout_ms: 1_000,
        sni: None,
        health_check: None,
        per_source: None,
    }
}

fn artifacts(listeners: Vec<Listener>) -> Artifacts {
    Artifacts {
        nftables: serde_json::json!({"nftables": []}).into(),
        qos: QosArtifact::default(),
        forward: ForwardArtifact { version: 1, listeners, kernel_health: vec![], kernel_dns: vec![] },
        manifest: Manifest {
            version: 1,
            host: "localhost".into(),
            commit: None,
            rules: vec![],
            artifact_hashes: BTreeMap::new(),
            setup: Default::default(),
            valid_until: None,
        },
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn without_a_forwarder_prepare_says_how_to_start_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = ForwardBackend::new(dir.path());
    b.prepare(&artifacts(vec![])).expect("no userspace rules: nothing to do");
    b.commit().unwrap();
    let err = b.prepare(&artifacts(vec![listener("dns-fwd", free_port())])).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("no forwarder is running"), "{text}");
    let help = err.help().map(|h| h.to_string()).unwrap_or_default();
    assert!(help.contains(&format!("fwc forward --state-dir {}", dir.path().display())), "{help}");
    let obs = b.observe(&artifacts(vec![listener("dns-fwd", 1)])).unwrap();
    assert_eq!(obs.drift.len(), 1);
}

#[test]
fn prepare_commit_observe_rollback() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let fwd = fwc_forwarder::Forwarder::new(fwc_forwarder::Options {
        drain_timeout: Duration::from_millis(200),
        ..Default::default()
    });
    let sock = fwc_forwarder::control::socket_path(dir.path());
    let l = rt.block_on(async { fwc_forwarder::control::bind(&sock) }).unwrap();
    rt.spawn(fwc_forwarder::control::serve(fwd.clone(), l));

    let (p1, p2) = (free_port(), free_port());
    let first = artifacts(vec![listener("a", p1)]);
    let second = artifacts(vec![listener("a", p1), listener("b", p2)]);
    let mut b = ForwardBackend::new(dir.path());
    b.prepare(&first).unwrap();
    assert!(std::net::TcpStream::connect(("127.0.0.1", p1)).is_err(), "prepare must not accept");
    b.commit().unwrap();
    let obs = b.observe(&first).unwrap();
    assert!(obs.in_sync(), "{:?}", obs.drift);
    std::net::TcpStream::connect(("127.0.0.1", p1)).expect("committed listener accepts");

    b.prepare(&second).unwrap();
    b.commit().unwrap();
    assert!(b.observe(&second).unwrap().in_sync());
    assert!(!b.observe(&first).unwrap().in_sync(), "drift against the old artifacts");
    b.rollback(Some(&first)).unwrap();
    assert!(b.observe(&first).unwrap().in_sync(), "rollback restores the previous listeners");

    // A port someone else holds fails prepare, naming the listener; nothing changes.
    let squat = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = squat.local_addr().unwrap().port();
    let err = b.prepare(&artifacts(vec![listener("a", p1), listener("c", taken)])).unwrap_err();
    assert!(err.to_string().contains(&taken.to_string()), "{err}");
    b.rollback(Some(&first)).unwrap();
    assert!(b.observe(&first).unwrap().in_sync());
    rt.block_on(fwd.shutdown());
}
