//! The values of weekly time windows, as the model holds them: days and minutes of a window, a
//! time zone, and a window's piece in UTC. Parsing them, and what they mean at an instant,
//! is [`crate::timewindow`].

use jiff::tz::TimeZone;

/// One window: on each of `days` (0 = Monday), from `start_min` to `end_min` minutes after
/// local midnight. `end_min <= start_min` crosses midnight: it ends on the next day
/// (`Fri 22:00-02:00` ends Saturday 02:00).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DayWindow {
    pub days: Vec<u8>,
    pub start_min: u16,
    pub end_min: u16,
}

/// A time zone as written in `tz=`: UTC, a fixed offset, or a named IANA zone.
#[derive(Debug, Clone)]
pub enum Zone {
    Utc,
    /// Minutes east of UTC.
    Fixed(i16),
    /// The zone's name as the tzdb spells it, and its rules.
    Named(String, TimeZone),
}

/// One piece of the windows' UTC form: on UTC weekday `day` (0 = Monday), the seconds since
/// UTC midnight `first..=last` (what nft's `meta day . meta hour` match).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct UtcPiece {
    pub day: u8,
    pub first: u32,
    pub last: u32,
}
