//! What the fleet reports, read from Prometheus' HTTP API (`GET /api/v1/query`, instant
//! queries): each host's applied commit and degraded series (by the `host` label every agent
//! series carries), and the gates' samples. Plain `http://` (put a local proxy in front of a
//! TLS-only Prometheus).

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use fwc_artifacts::rollout::Gate;
use serde_json::Value;

use super::controller::{gate_result, Degraded, GateResult, HostReport};
use super::rewind::AcceptedReport;
use super::RolloutError;

/// A Prometheus server: `http://host:port[/path-prefix]`.
#[derive(Debug, Clone)]
pub struct Prometheus {
    pub url: String,
    addr: SocketAddr,
    prefix: String,
    /// How long a host may be absent from the latest scrape before it counts as missing.
    pub missing_after: Duration,
}

/// One sample of an instant vector: its labels and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

impl Sample {
    /// `{a="1", b="2"}` (without `__name__`), for messages.
    pub fn label_text(&self) -> String {
        let inner: Vec<String> = self.labels.iter().filter(|(k, _)| *k != "__name__").map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        if inner.is_empty() {
            String::new()
        } else {
            format!("{{{}}}", inner.join(", "))
        }
    }
}

fn encode(q: &str) -> String {
    q.bytes().map(|b| if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

impl Prometheus {
    pub fn new(url: &str) -> Result<Prometheus, RolloutError> {
        let bad = |why: &str| RolloutError::new(format!("--prometheus {url:?}: {why}"), "write the server's base URL, e.g. --prometheus http://prometheus.example.net:9090");
        let rest = url.strip_prefix("http://").ok_or_else(|| bad(if url.starts_with("https://") { "https is not supported; use a local proxy or the plain-http address" } else { "not an http:// URL" }))?;
        let (authority, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/').to_string()),
            None => (rest, String::new()),
        };
        let with_port = if authority.rsplit_once(':').is_some_and(|(_, p)| p.chars().all(|c| c.is_ascii_digit()) && !p.is_empty()) && !authority.ends_with(']') {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        let addr = with_port.to_socket_addrs().map_err(|e| bad(&format!("cannot resolve {authority}: {e}")))?.next().ok_or_else(|| bad("no address"))?;
        Ok(Prometheus { url: url.to_string(), addr, prefix, missing_after: Duration::from_secs(60) })
    }

    /// An instant query: its samples (a scalar answer is one sample without labels).
    pub fn query(&self, q: &str) -> Result<Vec<Sample>, RolloutError> {
        let path = format!("{}/api/v1/query?query={}", self.prefix, encode(q));
        let fail = |why: String| RolloutError::new(format!("Prometheus {}: query {q:?}: {why}", self.url), "check --prometheus and that the server is up (curl URL/-/ready)");
        let (code, body) = crate::metrics::http_request(self.addr, "GET", &path, &[("Accept", "application/json")], b"").map_err(|e| fail(e.to_string()))?;
        let v: Value = serde_json::from_str(&body).map_err(|_| fail(format!("HTTP {code}, not a Prometheus API answer: {}", body.chars().take(200).collect::<String>())))?;
        if v["status"] != "success" {
            return Err(fail(format!("{}: {}", v["errorType"].as_str().unwrap_or("error"), v["error"].as_str().unwrap_or("?"))));
        }
        parse_result(&v["data"]).map_err(fail)
    }

    /// Every reporting host: applied commit, degraded series (value 1), last sample time; and
    /// the hosts seen within `missing_after` but not in the latest scrape (`current = false`).
    pub fn host_reports(&self) -> Result<BTreeMap<String, HostReport>, RolloutError> {
        let mut out: BTreeMap<String, HostReport> = BTreeMap::new();
        for s in self.query("timestamp(fwc_applied_commit_info == 1)")? {
            if let (Some(h), Some(c)) = (s.labels.get("host"), s.labels.get("commit")) {
                let r = out.entry(h.clone()).or_default();
                r.current = true;
                r.applied = Some(c.clone());
                r.last_seen = Some(r.last_seen.unwrap_or(0.0).max(s.value));
            }
        }
        for s in self.query("timestamp(fwc_agent_degraded)")? {
            if let Some(h) = s.labels.get("host") {
                let r = out.entry(h.clone()).or_default();
                r.current = true;
                r.last_seen = Some(r.last_seen.unwrap_or(0.0).max(s.value));
            }
        }
        for s in self.query("fwc_agent_degraded == 1")? {
            if let Some(h) = s.labels.get("host") {
                let d = Degraded { commit: s.labels.get("commit").cloned().unwrap_or_default(), reason: s.labels.get("reason").cloned().unwrap_or_default() };
                out.entry(h.clone()).or_default().degraded.push(d);
            }
        }
        let grace = format!(
            "group by (host) (last_over_time({{__name__=~\"fwc_applied_commit_info|fwc_agent_degraded\"}}[{}s]))",
            self.missing_after.as_secs().max(1)
        );
        for s in self.query(&grace)? {
            if let Some(h) = s.labels.get("host") {
                out.entry(h.clone()).or_default();
            }
        }
        for r in out.values_mut() {
            r.degraded.sort();
            r.degraded.dedup();
        }
        Ok(out)
    }

    /// The last rollout state each host accepted, as reported within the last hour (a host
    /// away for a while still counts).
    pub fn accepted_states(&self) -> Result<Vec<AcceptedReport>, RolloutError> {
        let mut out = vec![];
        for s in self.query("max_over_time(fwc_rollout_accepted_state[1h])")? {
            if let (Some(h), Some(st)) = (s.labels.get("host"), s.labels.get("state")) {
                if s.value.is_finite() && s.value >= 0.0 {
                    out.push(AcceptedReport { host: h.clone(), state: st.clone(), generation: s.value as u64 });
                }
            }
        }
        Ok(out)
    }

    /// Evaluate `gate` of wave `wave`. A query that fails is a gate without an answer (it
    /// never aborts the step: a degraded host must still halt the rollout).
    pub fn gate(&self, wave: usize, gate: &Gate) -> GateResult {
        let samples = self.query(&gate.query).map(|v| v.into_iter().map(|s| (s.label_text(), s.value)).collect::<Vec<(String, f64)>>());
        match &samples {
            Ok(v) => gate_result(wave, gate, Ok(v)),
            Err(e) => gate_result(wave, gate, Err(&e.what)),
        }
    }
}

/// `data` of a query answer: a vector or a scalar.
fn parse_result(data: &Value) -> Result<Vec<Sample>, String> {
    let value = |v: &Value| -> Result<f64, String> {
        let s = v.get(1).and_then(Value::as_str).ok_or("a sample without a value")?;
        match s {
            "+Inf" => Ok(f64::INFINITY),
            "-Inf" => Ok(f64::NEG_INFINITY),
            _ => s.parse().map_err(|_| format!("the value {s:?} is not a number")),
        }
    };
    match data["resultType"].as_str() {
        Some("vector") => data["result"]
            .as_array()
            .ok_or("no result array")?
            .iter()
            .map(|r| {
                let labels = r["metric"].as_object().map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string())).collect()).unwrap_or_default();
                Ok(Sample { labels, value: value(&r["value"])? })
            })
            .collect(),
        Some("scalar") => Ok(vec![Sample { labels: BTreeMap::new(), value: value(&data["result"])? }]),
        other => Err(format!("a {} result; a gate must be an instant vector or scalar", other.unwrap_or("missing"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse() {
        let v: Value = serde_json::from_str(r#"{"resultType":"vector","result":[{"metric":{"__name__":"x","host":"a"},"value":[1.5,"0.25"]},{"metric":{},"value":[1.5,"+Inf"]}]}"#).unwrap();
        let s = parse_result(&v).unwrap();
        assert_eq!(s[0].labels["host"], "a");
        assert_eq!(s[0].value, 0.25);
        assert_eq!(s[0].label_text(), "{host=\"a\"}");
        assert!(s[1].value.is_infinite());
        let v: Value = serde_json::from_str(r#"{"resultType":"scalar","result":[1.5,"3"]}"#).unwrap();
        assert_eq!(parse_result(&v).unwrap()[0].value, 3.0);
        let v: Value = serde_json::from_str(r#"{"resultType":"matrix","result":[]}"#).unwrap();
        assert!(parse_result(&v).unwrap_err().contains("matrix"));
    }

    #[test]
    fn urls() {
        let p = Prometheus::new("http://127.0.0.1:9090/prom/").unwrap();
        assert_eq!((p.addr.port(), p.prefix.as_str()), (9090, "/prom"));
        assert_eq!(Prometheus::new("http://127.0.0.1").unwrap().addr.port(), 80);
        assert!(Prometheus::new("https://x:1").unwrap_err().to_string().contains("https"));
        assert_eq!(encode("a{b=\"c d\"}"), "a%7Bb%3D%22c%20d%22%7D");
    }
}
