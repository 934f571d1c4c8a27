//! Weekly time windows, the one shape every time window of fwc has: on some days of the week,
//! from a minute after local midnight to another. Rule schedules (`during=`, evaluated by the
//! compiler's `timewindow`) and the rollout's promotion windows
//! ([`crate::rollout::Window`], evaluated by the runtime's rollout controller with the same
//! `timewindow` functions) both hold a [`DayWindow`]; each carries its zone beside it.

use serde::{Deserialize, Serialize};

/// One window: on each of `days` (0 = Monday), from `start_min` to `end_min` minutes after
/// local midnight. `end_min <= start_min` crosses midnight: it ends on the next day
/// (`Fri 22:00-02:00` ends Saturday 02:00). The end of a day is written 0 by schedules and
/// 1440 (24:00) by promotion windows; both mean midnight and evaluate alike.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DayWindow {
    pub days: Vec<u8>,
    pub start_min: u16,
    pub end_min: u16,
}

impl DayWindow {
    pub fn crosses_midnight(&self) -> bool {
        self.end_min <= self.start_min
    }
    /// Length in minutes.
    pub fn minutes(&self) -> u32 {
        if self.crosses_midnight() {
            1440 - u32::from(self.start_min) + u32::from(self.end_min)
        } else {
            u32::from(self.end_min - self.start_min)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::DayWindow;

    #[test]
    fn midnight_as_0_or_1440_is_the_same_length() {
        let w = |s, e| DayWindow { days: vec![4], start_min: s, end_min: e };
        assert_eq!(w(900, 0).minutes(), 540);
        assert_eq!(w(900, 1440).minutes(), 540);
        assert!(w(1320, 120).crosses_midnight());
        assert_eq!(w(1320, 120).minutes(), 240);
    }
}
