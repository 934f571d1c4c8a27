//! Rule schedules: `during=` windows, `tz=` and `until=` on filter rules and
//! forwards. Parses `until=`, resolves a ruleset for one instant (expired rules dropped, windows
//! put in UTC for the zone's offset at that instant), says until when that compiled form is
//! right (the next offset change or expiry: the agent recompiles then), and writes the
//! `fwc::rule-expires-soon` / `fwc::rule-expired` notes. The time is always an argument.

use jiff::Timestamp;

use crate::diag::{Diagnostic, Diagnostics};
use crate::model::{Ruleset, Schedule};
use crate::read::source::SourceMap;
use crate::features::timewindow::{self, Zone};
use crate::read::units::UnitError;

/// How long before `until=` `fwc check` and `fwc plan` warn.
pub const EXPIRY_WARNING_DAYS: i64 = 7;

const UNTIL_HELP: &str = "write until=\"2027-01-31\" (the rule holds through that day, in the rule's tz=, UTC by default), \
until=\"2027-01-31T18:00\" (a local time in tz=) or until=\"2027-01-31T18:00:00+01:00\" (RFC 3339)";

/// `until=`: a date (the rule holds through that day in `zone`), a local date-time in `zone`,
/// an RFC 3339 time with offset, or a time with a bracketed zone (`2027-01-31T18:00[Europe/Berlin]`).
/// Returns the first instant the rule no longer holds.
pub fn parse_until(s: &str, zone: &Zone) -> Result<Timestamp, UnitError> {
    let t = s.trim();
    let bad = || UnitError { message: format!("\"{s}\" is not a date or a date and time"), help: UNTIL_HELP.into() };
    if t.contains('[') {
        return t.parse::<jiff::Zoned>().map(|z| z.timestamp()).map_err(|_| bad());
    }
    if let Ok(ts) = t.parse::<Timestamp>() {
        return Ok(ts);
    }
    let tz = zone.time_zone();
    if let Ok(dt) = t.parse::<jiff::civil::DateTime>() {
        if t.len() > 10 {
            return dt.to_zoned(tz).map(|z| z.timestamp()).map_err(|_| bad());
        }
    }
    let date = t.parse::<jiff::civil::Date>().map_err(|_| bad())?;
    let next = date.tomorrow().map_err(|_| bad())?;
    next.to_zoned(tz).map(|z| z.timestamp()).map_err(|_| bad())
}

fn schedules(rs: &Ruleset) -> impl Iterator<Item = (&str, &Schedule)> {
    let rules = rs.chains.iter().flat_map(|c| c.rules.iter()).filter_map(|r| r.schedule.as_ref().map(|s| (r.name.value.as_str(), s)));
    rules.chain(rs.forwards.iter().filter_map(|f| f.schedule.as_ref().map(|s| (f.name.value.as_str(), s))))
}

/// Does any rule of `rs` have a schedule?
pub fn any(rs: &Ruleset) -> bool {
    schedules(rs).next().is_some()
}

/// Has the rule expired at `at`?
pub fn expired(s: &Schedule, at: Timestamp) -> bool {
    s.until.as_ref().is_some_and(|u| at >= u.end)
}

/// `rs` as it holds at `at`: expired rules and forwards removed, the `during=` windows of the
/// others in UTC for the offset their zone has at `at`.
pub fn resolve(rs: &Ruleset, at: Timestamp) -> Ruleset {
    let mut out = rs.clone();
    let fill = |s: &mut Schedule| {
        if let Some(d) = &s.during {
            s.utc = timewindow::utc_pieces(&d.value, &s.tz.value, at);
        }
    };
    for c in &mut out.chains {
        c.rules.retain(|r| !r.schedule.as_ref().is_some_and(|s| expired(s, at)));
        c.rules.iter_mut().filter_map(|r| r.more.given_mut().and_then(|m| m.schedule.as_mut())).for_each(fill);
    }
    out.forwards.retain(|f| !f.schedule.as_ref().is_some_and(|s| expired(s, at)));
    out.forwards.iter_mut().filter_map(|f| f.more.given_mut().and_then(|m| m.schedule.as_mut())).for_each(fill);
    out
}

/// Until when the artifacts compiled for `at` are right: the first later offset change of a
/// `during=` rule's zone, or the first `until=` still ahead. `None`: for ever.
pub fn valid_until(rs: &Ruleset, at: Timestamp) -> Option<Timestamp> {
    schedules(rs)
        .flat_map(|(_, s)| {
            let change = s.during.as_ref().and_then(|_| s.tz.value.next_change(at));
            let end = s.until.as_ref().map(|u| u.end).filter(|e| *e > at);
            [change, end]
        })
        .flatten()
        .min()
}

/// When an `until=` ends, for people: `at the end of 2027-01-31 (UTC)` for a date,
/// `at 2026-10-01 18:00 (Europe/Berlin)` for a time.
fn human(u: &crate::model::Until, zone: &Zone) -> String {
    let z = u.end.to_zoned(zone.time_zone());
    if u.text.trim().len() == 10 {
        let last = z.date().yesterday().map(|d| d.to_string()).unwrap_or_default();
        format!("at the end of {last} ({})", zone.name())
    } else {
        format!("at {} ({})", z.strftime("%Y-%m-%d %H:%M"), zone.name())
    }
}

/// `fwc::rule-expired` (the rule is not applied) and `fwc::rule-expires-soon` (within
/// [`EXPIRY_WARNING_DAYS`]) for the rules of `rs` at `at`.
pub fn notes(map: &SourceMap, rs: &Ruleset, at: Timestamp) -> Diagnostics {
    let mut out = Diagnostics::default();
    let soon = at.checked_add(jiff::SignedDuration::from_hours(24 * EXPIRY_WARNING_DAYS)).unwrap_or(at);
    let named = rs.chains.iter().flat_map(|c| c.rules.iter()).filter_map(|r| Some((format!("{} \"{}\"", r.action.as_str(), r.name.value), r.schedule.as_ref()?)));
    let fwds = rs.forwards.iter().filter_map(|f| Some((format!("forward \"{}\"", f.name.value), f.schedule.as_ref()?)));
    for (rule, s) in named.chain(fwds) {
        let Some(u) = &s.until else { continue };
        if at >= u.end {
            out.push(
                Diagnostic::warning("rule-expired", format!("expired {}, not applied", human(u, &s.tz.value)))
                    .at(map, u.span, "until= is past")
                    .rule(rule)
                    .help("remove the rule from the repository, or move until= later to apply it again"),
            );
        } else if u.end <= soon {
            out.push(
                Diagnostic::warning("rule-expires-soon", format!("expires {}", human(u, &s.tz.value)))
                    .at(map, u.span, "expires within a week")
                    .rule(rule)
                    .help("past until= the rule is removed at the next apply or agent reconcile; move until= later to keep it"),
            );
        }
    }
    out
}

/// The semantic checks of schedules: `during=` on a forward needs the kernel path (the
/// userspace forwarder keeps its listener all the time).
pub fn check(map: &SourceMap, rs: &Ruleset) -> Diagnostics {
    let mut out = Diagnostics::default();
    for f in &rs.forwards {
        let Some(d) = f.schedule.as_ref().and_then(|s| s.during.as_ref()) else { continue };
        let (backends, reason) = crate::place::select::place_forward(f, None);
        if f.sni.is_some() || backends.contains(&fwc_artifacts::BackendKind::Userspace) {
            out.push(
                Diagnostic::error("during-on-userspace-forward", format!("during= on forward \"{}\", which goes to the userspace forwarder", f.name.value))
                    .at(map, d.span, "time windows are enforced in the kernel")
                    .rule(format!("forward \"{}\"", f.name.value))
                    .help(format!("{reason}; during= works on kernel forwards (IP targets, no proxy-protocol, idle-timeout or sni): drop those, or put a `during=` filter rule in front of the listener")),
            );
        }
    }
    out
}

/// A schedule for people, for plan summaries: ` during Mon-Fri 08:00-18:00 Europe/Berlin until 2027-01-31`.
pub fn summary(s: &Schedule) -> String {
    let mut out = String::new();
    if let Some(d) = &s.during {
        let windows: Vec<String> = d.value.iter().map(timewindow::describe).collect();
        out.push_str(&format!(" during {} {}", windows.join(", "), s.tz.value.name()));
    }
    if let Some(u) = &s.until {
        out.push_str(&format!(" until {}", u.text));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    /// The injectable clock of the pure core: the same rules compiled on either side of
    /// Berlin's clock changes (2026-10-25, 2027-03-28) give windows one hour apart in UTC, and
    /// the manifest says when to compile again.
    #[test]
    fn compiled_window_moves_at_the_clock_changes_and_says_when() {
        let tree = crate::read::source::SourceTree::from_files([(
            "fwc.kdl".to_string(),
            "fwc 1\ninput policy=drop {\n    allow \"web\" proto=tcp port=443 during=\"Mon-Fri 08:00-18:00\" tz=\"Europe/Berlin\"\n}\n".to_string(),
        )]);
        let at = |t: &str| crate::compile_at(&tree, None, None, ts(t)).unwrap().0;
        let hours = |a: &crate::artifacts::Artifacts| {
            let text = crate::artifacts::to_pretty(&a.nftables);
            let i = text.find("\"range\"").expect("a time range");
            text[i..i + 120].split_whitespace().collect::<String>()
        };
        let summer = at("2026-10-24T12:00:00Z");
        assert!(hours(&summer).starts_with("\"range\":[21600,57599]"), "{}", hours(&summer));
        assert_eq!(summer.manifest.valid_until.as_deref(), Some("2026-10-25T01:00:00Z"));
        let winter = at("2026-10-25T01:00:00Z");
        assert!(hours(&winter).starts_with("\"range\":[25200,61199]"), "{}", hours(&winter));
        assert_eq!(winter.manifest.valid_until.as_deref(), Some("2027-03-28T01:00:00Z"));
        let spring = at("2027-03-28T01:00:00Z");
        assert!(hours(&spring).starts_with("\"range\":[21600,57599]"), "{}", hours(&spring));
        // The plan shows the rule as changed (its digest covers the UTC form).
        let plan = crate::diff::render(&crate::diff::plan(Some(&summer), &winter), false);
        assert!(plan.contains("~ filter \"web\"") || plan.contains("1 to change"), "{plan}");
        // Without schedules the time changes nothing and the manifest has no valid_until.
        let plain = crate::read::source::SourceTree::from_files([("fwc.kdl".to_string(), "fwc 1\ninput policy=drop {\n    allow \"web\" proto=tcp port=443\n}\n".to_string())]);
        let (a, b) = (crate::compile_at(&plain, None, None, ts("2026-10-24T12:00:00Z")).unwrap().0, crate::compile(&plain, None, None).unwrap().0);
        assert_eq!(a.files(), b.files());
        assert!(a.manifest.valid_until.is_none());
    }

    #[test]
    fn until_forms() {
        let berlin = timewindow::parse_zone("Europe/Berlin").unwrap();
        assert_eq!(parse_until("2027-01-31", &Zone::Utc).unwrap(), ts("2027-02-01T00:00:00Z"));
        assert_eq!(parse_until("2027-01-31", &berlin).unwrap(), ts("2027-01-31T23:00:00Z"));
        assert_eq!(parse_until("2027-01-31T18:00", &berlin).unwrap(), ts("2027-01-31T17:00:00Z"));
        assert_eq!(parse_until("2027-07-31T18:00", &berlin).unwrap(), ts("2027-07-31T16:00:00Z"));
        assert_eq!(parse_until("2027-01-31T18:00:00+05:00", &berlin).unwrap(), ts("2027-01-31T13:00:00Z"));
        assert_eq!(parse_until("2027-01-31T18:00[Europe/Berlin]", &Zone::Utc).unwrap(), ts("2027-01-31T17:00:00Z"));
        for bad in ["2027-13-01", "31.01.2027", "tomorrow", "2027-01-31T25:00", ""] {
            assert!(parse_until(bad, &Zone::Utc).is_err(), "{bad}");
        }
    }
}
