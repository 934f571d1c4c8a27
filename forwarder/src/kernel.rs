//! Failover of health-checked kernel forwards: when the probes (`crate::health`) change a
//! target's state, the forwarder replaces the one rule of the forward's dispatch chains in
//! `table inet fwc` with one over the targets that are up — one `nft -j -f -` transaction
//! that touches only that forward's chains. With every target down, all targets are used.

use std::io::Write;
use std::process::{Command, Stdio};

use fwc_artifacts::{rule_comment, KernelHealth, RuleKind, NFT_TABLE};
use serde_json::{json, Value};

use crate::health::Health;

/// The nft batch that points the dispatch chains of `kh` at the targets `health` calls up.
pub fn batch(kh: &KernelHealth, health: &Health) -> Value {
    let comment = rule_comment(RuleKind::Forward, &kh.rule);
    let mut cmds = Vec::new();
    for d in &kh.dispatch {
        let up: Vec<&String> = d.targets.iter().filter(|(i, _)| kh.targets.get(*i).is_none_or(|t| health.is_up(t))).map(|(_, c)| c).collect();
        let chains: Vec<&String> = if up.is_empty() { d.targets.iter().map(|(_, c)| c).collect() } else { up };
        let elems: Vec<Value> = chains.iter().enumerate().map(|(i, c)| json!([i, {"goto": {"target": c}}])).collect();
        let chain = json!({"family": "inet", "table": NFT_TABLE, "name": d.chain});
        cmds.push(json!({"flush": {"chain": chain}}));
        cmds.push(json!({"add": {"rule": {
            "family": "inet", "table": NFT_TABLE, "chain": d.chain, "comment": comment,
            "expr": [{"vmap": {"key": {"numgen": {"mode": "inc", "mod": chains.len(), "offset": 0}}, "data": {"set": elems}}}]
        }}}));
    }
    json!({"nftables": cmds})
}

/// Run the batch of [`batch`] (blocking: call from a blocking thread).
pub fn rewrite(kh: &KernelHealth, health: &Health) -> Result<(), String> {
    run_nft(&batch(kh, health))
}

/// Run one nft JSON batch (one transaction) with `nft -j -f -` (blocking).
pub(crate) fn run_nft(doc: &Value) -> Result<(), String> {
    let doc = doc.to_string();
    let mut child = Command::new("nft")
        .args(["-j", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run nft: {e}"))?;
    child.stdin.take().expect("piped").write_all(doc.as_bytes()).map_err(|e| format!("nft stdin: {e}"))?;
    let out = child.wait_with_output().map_err(|e| format!("nft: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// [`rewrite`] off the async threads; failures are logged (the next change or reload retries).
pub fn spawn_rewrite(kh: KernelHealth, health: std::sync::Arc<Health>) {
    tokio::task::spawn_blocking(move || match rewrite(&kh, &health) {
        Ok(()) => tracing::info!(rule = %kh.rule, "kernel dispatch rewritten: {}", describe(&kh, &health)),
        Err(e) => tracing::error!(rule = %kh.rule, "cannot rewrite the kernel dispatch chains: {e}"),
    });
}

fn describe(kh: &KernelHealth, health: &Health) -> String {
    let up: Vec<String> = kh.targets.iter().filter(|t| health.is_up(t)).map(|t| format!("{}:{}", t.host, t.port)).collect();
    if up.is_empty() { "every target is down: all targets in use".into() } else { format!("targets in use: {}", up.join(", ")) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fwc_artifacts::{ForwardTarget, HealthCheck, KernelDispatch};

    #[test]
    fn the_batch_uses_the_targets_that_are_up_and_all_when_none_is() {
        let t = |h: &str| ForwardTarget { host: h.into(), port: 80 };
        let kh = KernelHealth {
            rule: "web".into(),
            targets: vec![t("10.0.0.1"), t("10.0.0.2")],
            health_check: HealthCheck { interval_ms: 100, timeout_ms: 50, rise: 1, fall: 1 },
            dispatch: vec![KernelDispatch { chain: "fhc4_web".into(), targets: vec![(0, "fhc4_web_t0".into()), (1, "fhc4_web_t1".into())] }],
        };
        let h = Health::default();
        let gotos = |b: &Value| -> Vec<String> {
            b.pointer("/nftables/1/add/rule/expr/0/vmap/data/set").unwrap().as_array().unwrap().iter().map(|e| e[1]["goto"]["target"].as_str().unwrap().to_string()).collect()
        };
        assert_eq!(gotos(&batch(&kh, &h)), ["fhc4_web_t0", "fhc4_web_t1"]);
        h.record("web", &kh.targets[1], false, &kh.health_check);
        let b = batch(&kh, &h);
        assert_eq!(b["nftables"][0], json!({"flush": {"chain": {"family": "inet", "table": "fwc", "name": "fhc4_web"}}}));
        assert_eq!(gotos(&b), ["fhc4_web_t0"]);
        assert_eq!(b.pointer("/nftables/1/add/rule/comment").unwrap(), "fwc:forward:web");
        h.record("web", &kh.targets[0], false, &kh.health_check);
        assert_eq!(gotos(&batch(&kh, &h)), ["fhc4_web_t0", "fhc4_web_t1"], "every target down: all of them");
    }
}
