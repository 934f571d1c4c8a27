//! Replay protection of `POST /hooks/git`: an authentic delivery is accepted once, and only
//! while it is fresh. What was seen is remembered in the state dir, so a restart does not
//! reopen the window.
//!
//! - **Uniqueness.** The key of a delivery is the SHA-256 of what its signature covers (the
//!   body; for the fwc scheme the timestamp and the body), and, when the sender names it, its
//!   delivery id (`X-GitHub-Delivery`, `X-Gitea-Delivery`, `X-Gogs-Delivery`,
//!   `X-Gitlab-Event-UUID`, `X-Fwc-Delivery`). Either seen before = replay. The newest
//!   [`REMEMBERED`] keys are kept.
//! - **Freshness.** A signed timestamp, when the request carries one, must be within
//!   [`WINDOW`] of the agent's clock: `X-Fwc-Timestamp` (unix seconds, covered by
//!   `X-Fwc-Signature`) or a GitHub push payload's `repository.pushed_at`.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// File in the state dir.
pub const DELIVERIES_FILE: &str = "webhook-deliveries.json";
/// How far a signed timestamp may be from the agent's clock (either way).
pub const WINDOW: Duration = Duration::from_secs(300);
/// How many delivery keys are remembered.
pub const REMEMBERED: usize = 4096;

const DELIVERY_HEADERS: [&str; 5] = ["x-github-delivery", "x-gitea-delivery", "x-gogs-delivery", "x-gitlab-event-uuid", "x-fwc-delivery"];

/// Why an authentic delivery is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Seen before (same signed content or same delivery id).
    Replayed,
    /// Its signed timestamp is outside the window; seconds off.
    Stale(i64),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Replayed => f.write_str("replayed delivery: this signed request (or delivery id) was accepted before"),
            Refusal::Stale(s) => write!(f, "stale delivery: its signed timestamp is {s} s from the agent's clock (window {} s)", WINDOW.as_secs()),
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Seen {
    /// Oldest first.
    keys: VecDeque<String>,
}

/// The remembered deliveries of one state dir.
#[derive(Debug)]
pub struct DeliveryGuard {
    path: Option<PathBuf>,
    seen: Mutex<Seen>,
}

fn now_unix() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim())
}

/// The signed timestamp of a request (already authenticated), if it has one.
pub fn signed_timestamp(headers: &[(String, String)], body: &[u8]) -> Option<i64> {
    if header(headers, "x-fwc-signature").is_some() {
        return header(headers, "x-fwc-timestamp").and_then(|t| t.parse().ok());
    }
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v.get("repository")?.get("pushed_at")?.as_i64()
}

impl DeliveryGuard {
    /// Load what `state_dir` remembers (a missing or unreadable file starts empty; an
    /// unreadable one is reported and replaced).
    pub fn load(state_dir: &Path) -> DeliveryGuard {
        let path = state_dir.join(DELIVERIES_FILE);
        let seen = match std::fs::read_to_string(&path) {
            Ok(t) => serde_json::from_str(&t).unwrap_or_else(|e| {
                tracing::warn!("{}: {e}; starting with no remembered webhook deliveries", path.display());
                Seen::default()
            }),
            Err(_) => Seen::default(),
        };
        DeliveryGuard { path: Some(path), seen: Mutex::new(seen) }
    }

    /// A guard that remembers in memory only (tests).
    pub fn in_memory() -> DeliveryGuard {
        DeliveryGuard { path: None, seen: Mutex::default() }
    }

    /// Check an authentic delivery and remember it when it is accepted.
    pub fn admit(&self, headers: &[(String, String)], body: &[u8]) -> Result<(), Refusal> {
        self.admit_at(headers, body, now_unix())
    }

    fn admit_at(&self, headers: &[(String, String)], body: &[u8], now: i64) -> Result<(), Refusal> {
        if let Some(ts) = signed_timestamp(headers, body) {
            let off = ts - now;
            if off.unsigned_abs() > WINDOW.as_secs() {
                return Err(Refusal::Stale(off));
            }
        }
        let mut h = Sha256::new();
        if header(headers, "x-fwc-signature").is_some() {
            h.update(header(headers, "x-fwc-timestamp").unwrap_or("").as_bytes());
            h.update(b".");
        }
        h.update(body);
        let mut keys = vec![format!("body:{}", hex::encode(h.finalize()))];
        keys.extend(DELIVERY_HEADERS.iter().filter_map(|n| header(headers, n)).filter(|v| !v.is_empty()).map(|v| format!("id:{v}")));
        let mut seen = self.seen.lock().unwrap();
        if keys.iter().any(|k| seen.keys.contains(k)) {
            return Err(Refusal::Replayed);
        }
        seen.keys.extend(keys);
        while seen.keys.len() > REMEMBERED {
            seen.keys.pop_front();
        }
        if let Some(p) = &self.path {
            let text = serde_json::to_string(&*seen).expect("serializable");
            if let Err(e) = crate::state::write_atomic(p, text.as_bytes()) {
                tracing::warn!("cannot remember the webhook delivery in {}: {e:?}", p.display());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_delivery_is_accepted_once_and_remembered_across_restarts() {
        let d = tempfile::tempdir().unwrap();
        let g = DeliveryGuard::load(d.path());
        let body = br#"{"after":"abc"}"#;
        assert_eq!(g.admit(&h(&[]), body), Ok(()));
        assert_eq!(g.admit(&h(&[]), body), Err(Refusal::Replayed));
        // Same delivery id with another body: a replay too (GitHub's id is not signed, but the
        // body digest already catches a replay that changes the id).
        assert_eq!(g.admit(&h(&[("X-GitHub-Delivery", "d1")]), br#"{"after":"def"}"#), Ok(()));
        assert_eq!(g.admit(&h(&[("X-GitHub-Delivery", "d1")]), br#"{"after":"ghi"}"#), Err(Refusal::Replayed));
        assert_eq!(g.admit(&h(&[("X-GitHub-Delivery", "d2")]), br#"{"after":"def"}"#), Err(Refusal::Replayed));
        let g2 = DeliveryGuard::load(d.path());
        assert_eq!(g2.admit(&h(&[]), body), Err(Refusal::Replayed), "a restart must not forget");
    }

    #[test]
    fn signed_timestamps_must_be_fresh() {
        let g = DeliveryGuard::in_memory();
        let now = 1_800_000_000;
        let fwc = |ts: i64| h(&[("X-Fwc-Signature", "sha256=00"), ("X-Fwc-Timestamp", &ts.to_string())]);
        assert_eq!(g.admit_at(&fwc(now - 301), b"{}", now), Err(Refusal::Stale(-301)));
        assert_eq!(g.admit_at(&fwc(now + 400), b"{}", now), Err(Refusal::Stale(400)));
        assert_eq!(g.admit_at(&fwc(now - 10), b"{}", now), Ok(()));
        // Same body, new timestamp: a new delivery (the timestamp is signed with it).
        assert_eq!(g.admit_at(&fwc(now - 9), b"{}", now), Ok(()));
        assert_eq!(g.admit_at(&fwc(now - 9), b"{}", now), Err(Refusal::Replayed));
        let gh = format!(r#"{{"repository":{{"pushed_at":{}}}}}"#, now - 3600);
        assert_eq!(g.admit_at(&h(&[]), gh.as_bytes(), now), Err(Refusal::Stale(-3600)));
    }

    #[test]
    fn memory_is_bounded() {
        let g = DeliveryGuard::in_memory();
        for i in 0..REMEMBERED + 10 {
            g.admit_at(&h(&[]), format!("{i}").as_bytes(), 0).unwrap();
        }
        assert_eq!(g.seen.lock().unwrap().keys.len(), REMEMBERED);
    }
}
