//! Promotion windows (`window allow=… / deny=…` of the rollout policy), as pure functions of the
//! time: whether a promotion may happen now, and when the windows next let one through. The
//! controller's [`super::controller::decide`] asks before every promotion.

use std::time::{Duration, SystemTime};

use fwc_artifacts::rollout::Window;
use fwc_compiler::features::timewindow::{self, DayWindow, Zone};
use jiff::Timestamp;

/// How far [`next_open`] looks ahead: every window repeats weekly, so a week (and a day for the
/// offsets) covers every case.
const HORIZON_MIN: u64 = 8 * 24 * 60;

/// A window in the shared form of [`fwc_compiler::features::timewindow`] (the one evaluator of weekly
/// windows, also used by rule schedules): its zone is a named one (daylight saving followed)
/// or the fixed offset. A named zone this host's tz database lacks reads as UTC.
struct Compiled {
    allow: bool,
    window: [DayWindow; 1],
    zone: Zone,
}

fn compile(windows: &[Window]) -> Vec<Compiled> {
    windows
        .iter()
        .map(|w| {
            Compiled { allow: w.allow, window: [w.window.clone()], zone: timewindow::promotion_zone(w) }
        })
        .collect()
}

fn holds(w: &Compiled, min: i64) -> bool {
    Timestamp::from_second(min * 60).is_ok_and(|t| timewindow::holds(&w.window, &w.zone, t))
}

fn open_at_minute(windows: &[Compiled], min: i64) -> bool {
    let mut allows = windows.iter().filter(|w| w.allow).peekable();
    let allowed = allows.peek().is_none() || allows.any(|w| holds(w, min));
    allowed && !windows.iter().any(|w| !w.allow && holds(w, min))
}

fn minute_of(t: SystemTime) -> i64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => (d.as_secs() / 60) as i64,
        Err(e) => -(e.duration().as_secs().div_ceil(60) as i64),
    }
}

/// May a wave be promoted at `now`: inside at least one allow window (when there is any) and
/// inside no deny window. Without windows, always.
pub fn open_at(windows: &[Window], now: SystemTime) -> bool {
    windows.is_empty() || open_at_minute(&compile(windows), minute_of(now))
}

/// The first minute after `now` at which the windows are open; `None` when they never open
/// (within a week, hence never: e.g. deny windows covering every allow window).
pub fn next_open(windows: &[Window], now: SystemTime) -> Option<SystemTime> {
    let start = minute_of(now);
    let windows = compile(windows);
    (1..=HORIZON_MIN as i64).map(|i| start + i).find(|m| open_at_minute(&windows, *m)).map(|m| {
        if m >= 0 {
            SystemTime::UNIX_EPOCH + Duration::from_secs(m as u64 * 60)
        } else {
            SystemTime::UNIX_EPOCH - Duration::from_secs(m.unsigned_abs() * 60)
        }
    })
}

/// The reason `advance` gives while the windows are closed.
pub fn closed_reason(windows: &[Window], now: SystemTime) -> String {
    match next_open(windows, now) {
        Some(t) => format!("waiting: outside the promotion windows (next opens {})", humantime::format_rfc3339_seconds(t)),
        None => "waiting: outside the promotion windows (they never open: the deny windows cover every allow window)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(rfc: &str) -> SystemTime {
        humantime::parse_rfc3339(rfc).unwrap()
    }

    fn win(allow: bool, days: &[u8], start: u16, end: u16, offset: i16) -> Window {
        Window { allow, window: DayWindow { days: days.to_vec(), start_min: start, end_min: end }, offset_min: offset, tz: None }
    }

    #[test]
    fn weekdays_hours_and_offsets() {
        // 2026-11-23 is a Monday.
        let office = [win(true, &[0, 1, 2, 3, 4], 9 * 60, 17 * 60, 0), win(false, &[4], 15 * 60, 1440, 0)];
        assert!(open_at(&office, t("2026-11-23T09:00:00Z")));
        assert!(open_at(&office, t("2026-11-23T16:59:59Z")));
        assert!(!open_at(&office, t("2026-11-23T17:00:00Z")));
        assert!(!open_at(&office, t("2026-11-23T08:59:59Z")));
        assert!(open_at(&office, t("2026-11-27T14:59:00Z")), "Friday before the deny window");
        assert!(!open_at(&office, t("2026-11-27T15:00:00Z")), "Friday in the deny window");
        assert!(!open_at(&office, t("2026-11-28T12:00:00Z")), "Saturday");
        assert_eq!(next_open(&office, t("2026-11-27T15:30:00Z")), Some(t("2026-11-30T09:00:00Z")));
        assert_eq!(next_open(&office, t("2026-11-23T08:30:10Z")), Some(t("2026-11-23T09:00:00Z")));
        // Only deny: open except then.
        let deny = [win(false, &[6], 0, 1440, 0)];
        assert!(open_at(&deny, t("2026-11-28T23:59:00Z")));
        assert!(!open_at(&deny, t("2026-11-29T00:00:00Z")));
        assert!(open_at(&[], t("2026-11-29T00:00:00Z")));
        // +01:00: Monday 00:00-01:00 local is Sunday 23:00-24:00 UTC.
        let east = [win(true, &[0], 0, 60, 60)];
        assert!(open_at(&east, t("2026-11-22T23:30:00Z")));
        assert!(!open_at(&east, t("2026-11-23T00:30:00Z")));
        // -05:30: Friday 22:00-24:00 local is Saturday 03:30-05:30 UTC.
        let west = [win(true, &[4], 22 * 60, 1440, -330)];
        assert!(!open_at(&west, t("2026-11-27T22:30:00Z")));
        assert!(open_at(&west, t("2026-11-28T03:30:00Z")));
        assert!(!open_at(&west, t("2026-11-28T05:30:00Z")));
        // A named zone follows daylight saving: Mon 09:00-17:00 Europe/Berlin is 08:00 UTC in
        // winter and 07:00 UTC in summer.
        let berlin = [Window { tz: Some("Europe/Berlin".into()), ..win(true, &[0], 9 * 60, 17 * 60, 0) }];
        assert!(open_at(&berlin, t("2026-11-23T08:00:00Z")));
        assert!(!open_at(&berlin, t("2026-11-23T07:30:00Z")));
        assert!(open_at(&berlin, t("2026-06-22T07:30:00Z")));
        assert!(!open_at(&berlin, t("2026-06-22T15:00:00Z")));
        // Never open.
        let never = [win(true, &[0], 60, 120, 0), win(false, &[0, 1, 2, 3, 4, 5, 6], 0, 1440, 0)];
        assert_eq!(next_open(&never, t("2026-11-23T00:00:00Z")), None);
        assert!(closed_reason(&never, t("2026-11-23T00:00:00Z")).contains("never open"));
    }
}
