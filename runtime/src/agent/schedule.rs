//! Schedules in the agent: artifacts compiled from rules with `during=` or `until=`
//! are right only until their manifest's `valid_until` (a time zone's next daylight-saving
//! change, a rule's expiry). Past it, the agent compiles the applied commit again for the new
//! time and applies the result. Pure decisions on an explicit time; the clock is read by the
//! caller (with `FWC_AGENT_TEST_HOOKS=1`, `FWC_AGENT_TEST_NOW` fixes it for tests).

use std::time::Duration;

use jiff::Timestamp;

/// Must the applied artifacts (manifest `valid_until`) be compiled again at `now`?
pub fn recompile_due(valid_until: Option<&str>, now: Timestamp) -> bool {
    until(valid_until).is_some_and(|t| now >= t)
}

/// `valid_until` as a time (an unreadable one counts as due: compiling again is always safe).
pub fn until(valid_until: Option<&str>) -> Option<Timestamp> {
    valid_until.map(|v| v.parse::<Timestamp>().unwrap_or(Timestamp::UNIX_EPOCH))
}

/// How long the agent may sleep before `valid_until` passes (None: no deadline).
pub fn wait_until(valid_until: Option<Timestamp>, now: Timestamp) -> Option<Duration> {
    let t = valid_until?;
    Some(Duration::try_from(t.duration_since(now)).unwrap_or(Duration::ZERO))
}

/// The agent's clock: the real time, or `FWC_AGENT_TEST_NOW` (RFC 3339) when test hooks are on.
pub fn now(hooks: bool) -> Timestamp {
    if hooks {
        if let Some(t) = std::env::var("FWC_AGENT_TEST_NOW").ok().and_then(|v| v.parse::<Timestamp>().ok()) {
            return t;
        }
    }
    Timestamp::now()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn due_at_and_after_valid_until() {
        let vu = Some("2026-10-25T01:00:00Z");
        assert!(!recompile_due(None, ts("2030-01-01T00:00:00Z")));
        assert!(!recompile_due(vu, ts("2026-10-25T00:59:59Z")));
        assert!(recompile_due(vu, ts("2026-10-25T01:00:00Z")));
        assert!(recompile_due(vu, ts("2026-11-01T00:00:00Z")));
        assert!(recompile_due(Some("garbage"), ts("2026-01-01T00:00:00Z")));
        assert_eq!(wait_until(until(vu), ts("2026-10-25T00:59:00Z")), Some(Duration::from_secs(60)));
        assert_eq!(wait_until(until(vu), ts("2026-10-26T00:00:00Z")), Some(Duration::ZERO));
        assert_eq!(wait_until(None, ts("2026-10-26T00:00:00Z")), None);
    }
}
