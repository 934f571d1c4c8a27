//! The control socket: prepare / commit / status / abort over a unix socket, as `fwc apply`
//! and `fwc forward --stats` use it, with the blocking client.

mod common;

use std::time::Duration;

use common::*;
use fwc_forwarder::control::{self, Client, Request};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepare_commit_status_over_the_socket() {
    let dir = tempfile::tempdir().unwrap();
    let be = echo_backend().await;
    let f = fwc_forwarder::Forwarder::new(opts());
    let l = control::bind(&control::socket_path(dir.path())).unwrap();
    let server = tokio::spawn(control::serve(f.clone(), l));
    // A second forwarder on the same state dir is refused.
    assert!(control::bind(&control::socket_path(dir.path())).is_err());

    let cfg = config(vec![tcp("web", &[be])]);
    let squat = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut bad = tcp("bad", &[be]);
    bad.listen_port = squat.local_addr().unwrap().port();
    let bad_cfg = config(vec![bad]);
    let path = dir.path().to_path_buf();
    let st = tokio::task::spawn_blocking(move || {
        let mut c = Client::connect(&path, Duration::from_secs(5)).unwrap();
        let r = c.request(&Request::Prepare { config: bad_cfg }).unwrap();
        assert!(!r.ok);
        assert_eq!(r.conflicts.len(), 1, "{r:?}");
        let r = c.request(&Request::Prepare { config: cfg.clone() }).unwrap();
        assert!(r.ok, "{r:?}");
        assert_eq!(r.report.unwrap().added.len(), 1);
        let r = c.request(&Request::Status).unwrap();
        let st = r.status.unwrap();
        assert!(st.staged && st.listeners.is_empty(), "prepare changes nothing live");
        let r = c.request(&Request::Commit).unwrap();
        assert!(r.ok, "{r:?}");
        let r = c.request(&Request::Commit).unwrap();
        assert!(!r.ok, "nothing staged");
        c.request(&Request::Status).unwrap().status.unwrap()
    })
    .await
    .unwrap();
    assert_eq!(st.config.listeners.len(), 1);
    assert_eq!(st.listeners.len(), 1);
    assert_eq!(st.rules[0].rule, "web");
    server.abort();
    drop(squat);
}

#[test]
fn applied_config_from_a_state_dir() {
    let dir = tempfile::tempdir().unwrap();
    assert!(control::applied_config(dir.path()).unwrap().is_none());
    let cfg = config(vec![tcp("x", &["127.0.0.1:1".parse().unwrap()])]);
    std::fs::create_dir(dir.path().join("gen-000001")).unwrap();
    std::fs::write(dir.path().join("gen-000001/forward.json"), serde_json::to_string(&cfg).unwrap()).unwrap();
    std::fs::write(dir.path().join("state.json"), r#"{"version":1,"current":"gen-000001","previous":null}"#).unwrap();
    assert_eq!(control::applied_config(dir.path()).unwrap(), Some(cfg));
}
