//! The nft form of a rule's `during=` windows: one match
//! `meta day . meta hour { DAY . FIRST-LAST, … }` on the UTC pieces [`crate::features::schedule::resolve`]
//! computed. Numbers, not nft's `"08:00"` strings: nft converts those from the local time zone
//! of the nft process when it parses them, numbers it loads as they are (seconds since UTC
//! midnight; days 0 = Sunday, as the kernel's `meta day`).

use super::expr::*;
use super::out::Out;
use super::prelude::*;

/// The match for `s`'s windows; `None` when the rule has no `during=`.
pub(super) fn time_match(s: Option<&Schedule>) -> Option<Value> {
    let s = s?;
    s.during.as_ref()?;
    let elems: Vec<Value> = s
        .utc
        .iter()
        .map(|p| {
            let day = (u32::from(p.day) + 1) % 7;
            json!({"concat": [day, {"range": [p.first, p.last]}]})
        })
        .collect();
    Some(json!({"match": {"op": "==", "left": {"concat": [{"meta": {"key": "day"}}, {"meta": {"key": "hour"}}]}, "right": {"set": elems}}}))
}

/// [`out_rules`] with the time match after the rule's matches `expr` (before each tail).
pub(super) fn out_rules_timed(out: &mut Out, chain: &str, expr: Vec<S>, tails: Vec<Vec<S>>, comment: &str, time: &Value) {
    let pos = expr.len();
    for tail in tails {
        let mut e = expr.clone();
        e.extend(tail);
        out.rule_with(chain, e, Some(comment.to_string()), pos, time);
    }
}
