//! The values of weekly time windows, as the model holds them: days and minutes of a window, a
//! time zone, and a window's piece in UTC. Parsing them, and what they mean at an instant,
//! is [`crate::features::timewindow`].

use jiff::tz::TimeZone;

/// One window (days, start and end minute): the contract crate's, shared with the rollout's
/// promotion windows.
pub use fwc_artifacts::window::DayWindow;

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
