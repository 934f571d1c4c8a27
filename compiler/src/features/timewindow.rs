//! Weekly time windows (`"Mon-Fri 08:00-18:00, Sat 22:00-02:00"`) in a time zone (UTC, a fixed
//! offset, or a named IANA zone from the system tzdb, daylight saving included): parsing with
//! errors that teach, whether an instant is inside, and the windows' UTC form valid from an
//! instant until the zone's next offset change. Shared by rule schedules (`during=`, `tz=`;
//! see [`crate::features::schedule`]) and the rollout's promotion windows (`window allow=…`).
//! Pure: every function takes the time as an argument, none reads the clock.

use jiff::tz::TimeZone;
use jiff::Timestamp;

use crate::read::units::UnitError;

pub use crate::model::window::{DayWindow, UtcPiece, Zone};

/// The zone of a rollout promotion window ([`fwc_artifacts::rollout::Window`]: `offset_min`
/// or a tz name); its days and minutes are a [`DayWindow`] already (24:00 as 1440, which
/// every function here reads as midnight). A named zone this host's tz database lacks reads
/// as UTC. The one way between the two forms of a zone, with [`promotion_zone_fields`].
pub fn promotion_zone(w: &fwc_artifacts::rollout::Window) -> Zone {
    match &w.tz {
        Some(name) => parse_zone(name).unwrap_or(Zone::Utc),
        None if w.offset_min == 0 => Zone::Utc,
        None => Zone::Fixed(w.offset_min),
    }
}

/// A zone as the policy artifact's window carries it: (`offset_min`, `tz`).
pub fn promotion_zone_fields(zone: &Zone) -> (i16, Option<String>) {
    match zone {
        Zone::Utc => (0, None),
        Zone::Fixed(m) => (*m, None),
        Zone::Named(n, _) => (0, Some(n.clone())),
    }
}

/// Day names, index 0 = Monday.
pub const DAY_NAMES: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const WEEK_S: i64 = 7 * 86_400;

const WINDOW_HELP: &str = "write \"DAYS HH:MM-HH:MM\": a day (Sat), a range (Mon-Fri) or a comma list (Sat,Sun), then the hours, e.g. \"Mon-Fri 09:00-17:00\" or \"Fri 15:00-24:00\"";
const HOURS_HELP: &str = "write the hours as HH:MM-HH:MM on a 24-hour clock, e.g. 09:00-17:00 (24:00 ends at midnight)";

fn bad(message: String, help: &str) -> UnitError {
    UnitError { message, help: help.into() }
}

fn day(d: &str) -> Result<u8, UnitError> {
    DAY_NAMES.iter().position(|n| n.eq_ignore_ascii_case(d)).map(|i| i as u8).ok_or_else(|| {
        let help = match crate::suggest::did_you_mean(d, DAY_NAMES.iter().copied()) {
            Some(m) => format!("did you mean {m}? days are Mon, Tue, Wed, Thu, Fri, Sat, Sun"),
            None => "days are written Mon, Tue, Wed, Thu, Fri, Sat, Sun (a range: Mon-Fri; a list: Sat,Sun)".into(),
        };
        bad(format!("\"{d}\" is not a day"), &help)
    })
}

fn days(spec: &str) -> Result<Vec<u8>, UnitError> {
    let mut set = [false; 7];
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match item.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (day(a.trim())?, day(b.trim())?);
                let mut d = a;
                loop {
                    set[d as usize] = true;
                    if d == b {
                        break;
                    }
                    d = (d + 1) % 7;
                }
            }
            None => set[day(item)? as usize] = true,
        }
    }
    Ok((0..7u8).filter(|d| set[*d as usize]).collect())
}

fn clock(t: &str, end: bool) -> Result<u16, UnitError> {
    let parsed = t.split_once(':').and_then(|(h, m)| {
        let ok = |x: &str| x.len() == 2 && x.bytes().all(|c| c.is_ascii_digit());
        (ok(h) && ok(m)).then(|| (h.parse::<u16>().unwrap_or(99), m.parse::<u16>().unwrap_or(99)))
    });
    match parsed {
        Some((24, 0)) if end => Ok(1440),
        Some((h, m)) if h < 24 && m < 60 => Ok(h * 60 + m),
        _ => Err(bad(format!("\"{t}\" is not a time of day (HH:MM, 00:00 to {})", if end { "24:00" } else { "23:59" }), HOURS_HELP)),
    }
}

fn hours(h: &str) -> Result<(u16, u16), UnitError> {
    let Some((a, b)) = h.split_once('-') else {
        return Err(bad(format!("\"{h}\" is not HH:MM-HH:MM"), HOURS_HELP));
    };
    let (start, end) = (clock(a, false)?, clock(b, true)?);
    if start == end {
        return Err(bad(format!("the window {h} is empty (it starts when it ends)"), "for a whole day write 00:00-24:00"));
    }
    Ok((start, end % 1440))
}

/// Parse one or several windows: `"Mon-Fri 08:00-18:00"`, `"Mon-Fri 08:00-18:00, Sat 10:00-14:00"`
/// (windows separated by `,` or `;` after the hours), `"Fri,Sat 22:00-02:00"` (crosses
/// midnight: ends the next day), `"08:00-18:00"` (every day). Days are 0 = Monday.
pub fn parse_windows(s: &str) -> Result<Vec<DayWindow>, UnitError> {
    let mut out = Vec::new();
    let mut day_words: Vec<&str> = Vec::new();
    let normal = s.replace(';', ", ");
    for token in normal.split_whitespace() {
        let looks_like_hours = token.starts_with(|c: char| c.is_ascii_digit());
        if !looks_like_hours {
            day_words.push(token);
            continue;
        }
        // A `,` after the hours ends the window (`Mon-Fri 08:00-18:00, Sat 10:00-14:00`).
        let h = token.strip_suffix(',').unwrap_or(token);
        let spec = day_words.join(",");
        let d = if spec.trim_matches(',').is_empty() { (0..7).collect() } else { days(&spec)? };
        let (start_min, end_min) = hours(h)?;
        out.push(DayWindow { days: d, start_min, end_min });
        day_words.clear();
    }
    if !day_words.is_empty() || out.is_empty() {
        return Err(bad(format!("\"{s}\" is not \"DAYS HH:MM-HH:MM\""), WINDOW_HELP));
    }
    Ok(out)
}

/// A window for people: `Mon-Fri 09:00-17:00`.
pub fn describe(w: &DayWindow) -> String {
    let mut parts: Vec<String> = vec![];
    let mut i = 0;
    while i < w.days.len() {
        let mut j = i;
        while j + 1 < w.days.len() && w.days[j + 1] == w.days[j] + 1 {
            j += 1;
        }
        let (a, b) = (DAY_NAMES[w.days[i] as usize % 7], DAY_NAMES[w.days[j] as usize % 7]);
        parts.push(match j - i {
            0 => a.to_string(),
            1 => format!("{a},{b}"),
            _ => format!("{a}-{b}"),
        });
        i = j + 1;
    }
    let hm = |m: u16| format!("{:02}:{:02}", m / 60, m % 60);
    let end = if w.end_min == 0 { "24:00".to_string() } else { hm(w.end_min) };
    format!("{} {}-{end}", parts.join(","), hm(w.start_min))
}

impl PartialEq for Zone {
    fn eq(&self, other: &Zone) -> bool {
        self.name() == other.name()
    }
}
impl Eq for Zone {}

impl serde::Serialize for Zone {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name())
    }
}

impl Zone {
    /// `UTC`, `+01:00`, `Europe/Berlin`.
    pub fn name(&self) -> String {
        match self {
            Zone::Utc => "UTC".into(),
            Zone::Fixed(o) => format!("{}{:02}:{:02}", if *o < 0 { '-' } else { '+' }, o.unsigned_abs() / 60, o.unsigned_abs() % 60),
            Zone::Named(n, _) => n.clone(),
        }
    }

    /// The offset from UTC in seconds at `t`.
    pub fn offset_at(&self, t: Timestamp) -> i32 {
        match self {
            Zone::Utc => 0,
            Zone::Fixed(m) => i32::from(*m) * 60,
            Zone::Named(_, tz) => tz.to_offset(t).seconds(),
        }
    }

    /// The first instant after `t` at which the offset changes (daylight saving); `None` for
    /// UTC, fixed offsets and zones without further changes.
    pub fn next_change(&self, t: Timestamp) -> Option<Timestamp> {
        match self {
            Zone::Named(_, tz) => tz.following(t).next().map(|tr| tr.timestamp()),
            _ => None,
        }
    }

    /// The zone's rules (for civil-time conversions).
    pub fn time_zone(&self) -> TimeZone {
        match self {
            Zone::Utc => TimeZone::UTC,
            Zone::Fixed(m) => TimeZone::fixed(jiff::tz::Offset::from_seconds(i32::from(*m) * 60).unwrap_or(jiff::tz::Offset::UTC)),
            Zone::Named(_, tz) => tz.clone(),
        }
    }
}

const TZ_HELP: &str = "write tz=\"UTC\" (the default), a zone of the tz database such as tz=\"Europe/Berlin\" (daylight saving time followed), or a fixed offset such as tz=\"+01:00\"";

/// Parse `tz=`: `UTC`/`Z`, a fixed offset `+01:00` / `-05:30` (up to ±14:00), or a named
/// zone of the system's tz database (`/usr/share/zoneinfo`, package tzdata), with a
/// "did you mean" for a misspelled name.
pub fn parse_zone(s: &str) -> Result<Zone, UnitError> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("UTC") || t == "Z" {
        return Ok(Zone::Utc);
    }
    let rest = t.strip_prefix("UTC").unwrap_or(t);
    let sign = match rest.as_bytes().first() {
        Some(b'+') => 1,
        Some(b'-') => -1,
        _ if t.bytes().any(|c| c.is_ascii_alphabetic()) => return named_zone(t),
        _ => return Err(bad(format!("\"{s}\" is not UTC, an offset like +01:00 or a zone like Europe/Berlin"), TZ_HELP)),
    };
    let digits = &rest[1..];
    let (h, m) = digits.split_once(':').unwrap_or((digits, "00"));
    let two = |x: &str| (x.len() == 2 && x.bytes().all(|c| c.is_ascii_digit())).then(|| x.parse::<i16>().ok()).flatten();
    match (two(h), two(m)) {
        (Some(0), Some(0)) => Ok(Zone::Utc),
        (Some(h), Some(m)) if m < 60 && h * 60 + m <= 14 * 60 => Ok(Zone::Fixed(sign * (h * 60 + m))),
        _ => Err(bad(format!("\"{s}\" is not an offset from -14:00 to +14:00 (like +01:00)"), TZ_HELP)),
    }
}

fn named_zone(name: &str) -> Result<Zone, UnitError> {
    let db = jiff::tz::db();
    if let Ok(tz) = db.get(name) {
        let canonical = tz.iana_name().unwrap_or(name).to_string();
        return Ok(Zone::Named(canonical, tz));
    }
    let names: Vec<String> = db.available().map(|n| n.as_str().to_string()).collect();
    if names.is_empty() {
        return Err(bad(
            format!("unknown time zone \"{name}\": this system has no time zone database"),
            "install the tzdata package (/usr/share/zoneinfo), or write a fixed offset such as tz=\"+01:00\"",
        ));
    }
    let help = match crate::suggest::did_you_mean(name, names.iter().map(String::as_str)) {
        Some(n) => format!("did you mean \"{n}\"? {TZ_HELP}"),
        None => TZ_HELP.to_string(),
    };
    Err(bad(format!("unknown time zone \"{name}\""), &help))
}

/// Whether `t` lies inside one of `windows` read in `zone`.
pub fn holds(windows: &[DayWindow], zone: &Zone, t: Timestamp) -> bool {
    let local = t.as_second() + i64::from(zone.offset_at(t));
    let day_index = local.div_euclid(86_400);
    // 1970-01-01 was a Thursday (3 with Monday = 0).
    let weekday = (day_index + 3).rem_euclid(7) as u8;
    let yesterday = (weekday + 6) % 7;
    let minute = (local.rem_euclid(86_400) / 60) as u16;
    windows.iter().any(|w| {
        if w.crosses_midnight() {
            (w.days.contains(&weekday) && minute >= w.start_min) || (w.days.contains(&yesterday) && minute < w.end_min)
        } else {
            w.days.contains(&weekday) && w.start_min <= minute && minute < w.end_min
        }
    })
}

/// The windows in UTC for the offset `zone` has at `t`: sorted, non-overlapping pieces, each
/// within one UTC day. Exact from `t` until [`Zone::next_change`].
pub fn utc_pieces(windows: &[DayWindow], zone: &Zone, t: Timestamp) -> Vec<UtcPiece> {
    let offset = i64::from(zone.offset_at(t));
    // Intervals [a, b) in seconds since Monday 00:00 UTC, wrapped into the week.
    let mut iv: Vec<(i64, i64)> = Vec::new();
    for w in windows {
        for &d in &w.days {
            let a = i64::from(d) * 86_400 + i64::from(w.start_min) * 60 - offset;
            let b = a + i64::from(w.minutes()) * 60;
            let (a, b) = (a.rem_euclid(WEEK_S), a.rem_euclid(WEEK_S) + (b - a));
            if b > WEEK_S {
                iv.push((a, WEEK_S));
                iv.push((0, b - WEEK_S));
            } else {
                iv.push((a, b));
            }
        }
    }
    iv.sort();
    let mut merged: Vec<(i64, i64)> = Vec::new();
    for (a, b) in iv {
        match merged.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    let mut out = Vec::new();
    for (mut a, b) in merged {
        while a < b {
            let day_end = (a / 86_400 + 1) * 86_400;
            let e = b.min(day_end);
            out.push(UtcPiece { day: (a / 86_400) as u8, first: (a % 86_400) as u32, last: ((e - 1) % 86_400) as u32 });
            a = e;
        }
    }
    out
}

/// The first instant after `t` at which [`holds`] changes its answer, within 8 days (windows
/// repeat weekly); `None` when it never does (the windows cover the whole week, or nothing).
/// Minute resolution (windows are written in minutes).
pub fn next_edge(windows: &[DayWindow], zone: &Zone, t: Timestamp) -> Option<Timestamp> {
    let now = holds(windows, zone, t);
    let start = t.as_second().div_euclid(60) + 1;
    (start..start + 8 * 1440).map(|m| Timestamp::from_second(m * 60).expect("in range")).find(|x| holds(windows, zone, *x) != now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn parses_one_and_several_windows() {
        assert_eq!(parse_windows("Mon-Fri 08:00-18:00").unwrap(), vec![DayWindow { days: vec![0, 1, 2, 3, 4], start_min: 480, end_min: 1080 }]);
        let two = parse_windows("Mon-Fri 08:00-18:00, Sat 10:00-14:00").unwrap();
        assert_eq!(two.len(), 2);
        assert_eq!(two[1], DayWindow { days: vec![5], start_min: 600, end_min: 840 });
        assert_eq!(parse_windows("sat,Sun 10:00-14:00").unwrap()[0].days, vec![5, 6]);
        assert_eq!(parse_windows("Sat, Sun 10:00-14:00; Mon 00:00-24:00").unwrap().len(), 2);
        assert_eq!(parse_windows("08:00-18:00").unwrap()[0].days.len(), 7);
        let night = &parse_windows("Fri 22:00-02:00").unwrap()[0];
        assert!(night.crosses_midnight());
        assert_eq!(night.minutes(), 240);
        assert_eq!(parse_windows("Fri-Mon 00:00-24:00").unwrap()[0].days, vec![0, 4, 5, 6]);
        for bad in ["Mon", "Mon 8-18", "Mon 08:00", "Moon 08:00-18:00", "Mon 25:00-26:00", "Mon 08:00-08:00", "", "Mon 08:00-18:00 Tue"] {
            assert!(parse_windows(bad).is_err(), "{bad}");
        }
        let e = parse_windows("Mno 08:00-18:00").unwrap_err();
        assert!(e.help.contains("did you mean Mon"), "{}", e.help);
        assert_eq!(describe(night), "Fri 22:00-02:00");
        assert_eq!(describe(&parse_windows("Mon 00:00-24:00").unwrap()[0]), "Mon 00:00-24:00");
    }

    #[test]
    fn zones_and_suggestions() {
        assert_eq!(parse_zone("UTC").unwrap(), Zone::Utc);
        assert_eq!(parse_zone("+01:00").unwrap(), Zone::Fixed(60));
        assert_eq!(parse_zone("-05:30").unwrap(), Zone::Fixed(-330));
        assert!(parse_zone("+15:00").is_err());
        let z = parse_zone("Europe/Berlin").unwrap();
        assert_eq!(z.name(), "Europe/Berlin");
        let e = parse_zone("Europe/Berln").unwrap_err();
        assert!(e.help.contains("did you mean \"Europe/Berlin\""), "{}", e.help);
        // The tz database's names are matched without regard to case, and spelled as it does.
        assert_eq!(parse_zone("europe/berlin").unwrap().name(), "Europe/Berlin");
        assert!(parse_zone("Mars/Olympus").is_err());
    }

    #[test]
    fn berlin_windows_follow_daylight_saving() {
        let berlin = parse_zone("Europe/Berlin").unwrap();
        let office = parse_windows("Mon-Fri 08:00-18:00").unwrap();
        // Friday 2026-10-23, summer time (+02:00): 08:00 local is 06:00 UTC.
        let summer = ts("2026-10-23T12:00:00Z");
        assert_eq!(utc_pieces(&office, &berlin, summer)[0], UtcPiece { day: 0, first: 6 * 3600, last: 16 * 3600 - 1 });
        // The offset changes on Sunday 2026-10-25 01:00 UTC; afterwards 08:00 local is 07:00 UTC.
        assert_eq!(berlin.next_change(summer), Some(ts("2026-10-25T01:00:00Z")));
        let winter = ts("2026-10-25T01:00:00Z");
        assert_eq!(utc_pieces(&office, &berlin, winter)[0], UtcPiece { day: 0, first: 7 * 3600, last: 17 * 3600 - 1 });
        assert_eq!(berlin.next_change(winter), Some(ts("2027-03-28T01:00:00Z")));
        // And back on 2027-03-28.
        assert_eq!(utc_pieces(&office, &berlin, ts("2027-03-28T01:00:00Z"))[0].first, 6 * 3600);
        // holds() agrees with the pieces on both sides of the change.
        assert!(holds(&office, &berlin, ts("2026-10-26T07:00:00Z")));
        assert!(!holds(&office, &berlin, ts("2026-10-26T06:59:00Z")));
        assert!(holds(&office, &berlin, ts("2026-10-23T06:00:00Z")));
        assert!(!holds(&office, &berlin, ts("2026-10-23T16:00:00Z")));
    }

    #[test]
    fn pieces_split_at_utc_midnight_and_week_end() {
        // Monday 00:00-01:00 at +01:00 is Sunday 23:00-24:00 UTC.
        let w = parse_windows("Mon 00:00-01:00").unwrap();
        assert_eq!(utc_pieces(&w, &Zone::Fixed(60), Timestamp::UNIX_EPOCH), vec![UtcPiece { day: 6, first: 82_800, last: 86_399 }]);
        // Sunday 22:00-02:00 UTC wraps into Monday.
        let w = parse_windows("Sun 22:00-02:00").unwrap();
        assert_eq!(
            utc_pieces(&w, &Zone::Utc, Timestamp::UNIX_EPOCH),
            vec![UtcPiece { day: 0, first: 0, last: 7199 }, UtcPiece { day: 6, first: 79_200, last: 86_399 }]
        );
        // Overlapping windows merge; a whole week is seven whole days.
        let w = parse_windows("Mon-Sun 00:00-24:00, Tue 10:00-12:00").unwrap();
        assert_eq!(utc_pieces(&w, &Zone::Fixed(-330), Timestamp::UNIX_EPOCH).len(), 7);
    }

    #[test]
    fn holds_matches_pieces_every_quarter_hour() {
        let berlin = parse_zone("Europe/Berlin").unwrap();
        let w = parse_windows("Mon-Fri 08:00-18:00, Fri,Sat 22:00-02:00, Sun 00:00-00:30").unwrap();
        let start = ts("2026-11-23T00:00:00Z");
        let pieces = utc_pieces(&w, &berlin, start);
        for q in 0..(7 * 96) {
            let t = Timestamp::from_second(start.as_second() + q * 900).unwrap();
            let s = t.as_second();
            let (day, sec) = (((s.div_euclid(86_400) + 3).rem_euclid(7)) as u8, s.rem_euclid(86_400) as u32);
            let by_pieces = pieces.iter().any(|p| p.day == day && p.first <= sec && sec <= p.last);
            assert_eq!(by_pieces, holds(&w, &berlin, t), "{t}");
        }
        assert_eq!(next_edge(&w, &berlin, ts("2026-11-23T06:30:00Z")), Some(ts("2026-11-23T07:00:00Z")));
    }
}
