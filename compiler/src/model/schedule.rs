//! Schedules (`during=`, `tz=`, `until=`) of a rule as the model holds them; see
//! `crate::features::schedule` for what they mean.

use serde::Serialize;

use super::span::Spanned;
use super::window;

/// When a filter rule or forward holds: inside its `during=` windows (read in `tz`), and until
/// `until`. [`crate::features::schedule::resolve`] fills `utc` for the compile's time.
#[derive(Debug, Clone, Serialize)]
pub struct Schedule {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub during: Option<Spanned<Vec<window::DayWindow>>>,
    /// `tz=` (UTC when not given).
    pub tz: Spanned<window::Zone>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<Spanned<Until>>,
    /// The windows in UTC for the offset `tz` has at the compile's time (what nft matches);
    /// empty before [`crate::features::schedule::resolve`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub utc: Vec<window::UtcPiece>,
}

/// `until=`: the rule holds before `end` (a date means through that day, in `tz=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Until {
    /// As written.
    pub text: String,
    /// The first instant the rule no longer holds.
    pub end: jiff::Timestamp,
}

impl Serialize for Until {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.end.to_string())
    }
}
