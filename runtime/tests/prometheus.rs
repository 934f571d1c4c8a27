//! The agent's `/metrics` as a real Prometheus stack sees it: `promtool check metrics` (the
//! linter Prometheus ships) finds nothing to complain about in the text format, and a real
//! Prometheus server scrapes the endpoint (OpenMetrics, as it negotiates by default) and
//! answers queries over what it scraped, including the series alerts depend on at 0.

use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fwc_compiler::artifacts::BackendKind;
use fwc_compiler::model::RuleKind;
use fwc_runtime::backend::RuleCounter;
use fwc_runtime::metrics::{self, Health, Metrics, ServerState};

/// What Prometheus 2.x sends when a scrape config asks for the classic text format.
const ACCEPT_TEXT: &str = "text/plain;version=0.0.4;q=1,*/*;q=0.1";

/// A metrics server with a sample in every family.
fn server() -> (metrics::Server, Arc<Metrics>) {
    let m = Arc::new(Metrics::new());
    m.apply_duration_seconds.observe(0.42);
    Metrics::inc(&m.apply_total, "ok");
    m.apply_succeeded();
    m.fetched(true);
    m.drift_checked();
    m.set_applied_commit(Some("0123456789abcdef0123456789abcdef01234567"));
    m.drift_total.inc();
    m.observe_rule_counters(&[
        RuleCounter { rule: "ssh".into(), kind: RuleKind::Filter, backend: BackendKind::Nftables, packets: 5, bytes: 300 },
        RuleCounter { rule: "web".into(), kind: RuleKind::Forward, backend: BackendKind::Nftables, packets: 2, bytes: 120 },
        RuleCounter { rule: "app".into(), kind: RuleKind::Forward, backend: BackendKind::Userspace, packets: 0, bytes: 4096 },
    ]);
    m.set_forward_connections("app", 3);
    m.observe_qos_counters(&[("tenant-b/up".into(), "dropped".into(), 4)]);
    m.set_degraded(None, Some("0123456789abcdef0123456789abcdef01234567"));
    let st = ServerState {
        metrics: m.clone(),
        health: Arc::new(Health::new(Duration::from_secs(60))),
        webhook: None,
        deliveries: None,
        on_push: Arc::new(|| {}),
    };
    (metrics::serve("127.0.0.1:0".parse().unwrap(), st).unwrap(), m)
}

fn get(addr: SocketAddr, accept: &str) -> String {
    let (code, body) = metrics::http_request(addr, "GET", "/metrics", &[("Accept", accept)], b"").unwrap();
    assert_eq!(code, 200);
    body
}

#[test]
fn promtool_check_metrics_is_clean() {
    if !fwc_testkit::tool("promtool_check_metrics_is_clean", "promtool", "prometheus") {
        return;
    }
    let (srv, _m) = server();
    let text = get(srv.addr, ACCEPT_TEXT);
    assert!(text.contains("# TYPE fwc_apply_total counter"), "{text}");
    let mut p = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    p.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let o = p.wait_with_output().unwrap();
    let report = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success() && report.trim().is_empty(), "promtool check metrics:\n{report}\non:\n{text}");
}

/// A Prometheus server scraping the agent every second (testkit's; killed on drop).
struct Prometheus {
    _server: fwc_testkit::Prometheus,
    url: String,
}

impl Prometheus {
    fn scraping(target: SocketAddr) -> Prometheus {
        let server = fwc_testkit::Prometheus::start("fwc", &[target], "1s");
        Prometheus { url: server.addr.to_string(), _server: server }
    }

    /// Instant query; the `data.result` array of the answer.
    fn query(&self, q: &str) -> Option<Vec<serde_json::Value>> {
        let path = format!("/api/v1/query?query={}", q.bytes().map(|b| if b.is_ascii_alphanumeric() || b == b'_' { (b as char).to_string() } else { format!("%{b:02X}") }).collect::<String>());
        let (code, body) = metrics::http_request(self.url.parse().ok()?, "GET", &path, &[], b"").ok()?;
        if code != 200 {
            return None;
        }
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        v["data"]["result"].as_array().cloned()
    }

    /// Wait until `q` returns at least one series.
    fn wait_for(&self, q: &str) -> Vec<serde_json::Value> {
        let t0 = Instant::now();
        loop {
            match self.query(q) {
                Some(r) if !r.is_empty() => return r,
                _ if t0.elapsed() > Duration::from_secs(60) => panic!("prometheus: no result for {q} within 60 s"),
                _ => std::thread::sleep(Duration::from_millis(250)),
            }
        }
    }
}

#[test]
fn a_real_prometheus_scrapes_and_queries_the_agent() {
    if !fwc_testkit::tool("a_real_prometheus_scrapes_and_queries_the_agent", "prometheus", "prometheus") {
        return;
    }
    let (srv, m) = server();
    let prom = Prometheus::scraping(srv.addr);
    let up = prom.wait_for("up{job=\"fwc\"}");
    assert_eq!(up[0]["value"][1], "1", "the scrape failed: {up:?}");
    // The series the documented alerts use exist at 0 before the first event.
    let refused = prom.wait_for("fwc_commit_refused_total{reason=\"signature\"}");
    assert_eq!(refused[0]["value"][1], "0");
    let build = prom.wait_for("fwc_build_info");
    assert_eq!(build[0]["metric"]["version"], env!("CARGO_PKG_VERSION"));
    // One rule label format: the forward `web` is `rule="web"` whatever the backend.
    let web = prom.wait_for("fwc_rule_packets_total{rule=\"web\",kind=\"forward\"}");
    assert_eq!(web[0]["metric"]["backend"], "nftables");
    assert!(prom.query("fwc_rule_packets_total{rule=~\".*:.*\"}").is_some_and(|r| r.is_empty()));
    // A refusal after the series existed is an increase Prometheus sees.
    m.refused("signature");
    let t0 = Instant::now();
    loop {
        let r = prom.wait_for("fwc_commit_refused_total{reason=\"signature\"}");
        if r[0]["value"][1] == "1" {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "the refusal never reached prometheus: {r:?}");
        std::thread::sleep(Duration::from_millis(250));
    }
    let ts = prom.wait_for("fwc_last_apply_success_timestamp_seconds");
    let v: f64 = ts[0]["value"][1].as_str().unwrap().parse().unwrap();
    assert!(v > 1.7e9, "{ts:?}");

    // Every query of the Grafana dashboard is valid PromQL over metrics the agent exports.
    let exported = m.encode();
    for expr in dashboard_queries() {
        let q = expr.replace("$instance", ".*").replace("$__rate_interval", "1m");
        assert!(prom.query(&q).is_some(), "the dashboard's query does not run: {q}");
        for name in metric_names(&expr) {
            let family = ["_bucket", "_sum", "_count"].iter().fold(name.as_str(), |n, s| n.strip_suffix(s).unwrap_or(n));
            assert!(exported.contains(&format!("\n{name}")) || exported.contains(&format!("# TYPE {family} ")), "the dashboard uses {name}, which the agent does not export");
        }
    }
}

fn dashboard_queries() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/grafana/fwc-agent.json");
    let d: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut out = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push(t["expr"].as_str().unwrap().to_string());
        }
    }
    assert!(out.len() > 10, "{out:?}");
    out
}

fn metric_names(expr: &str) -> Vec<String> {
    let mut v = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("fwc_") {
        let tail = &rest[i..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        v.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    v
}
