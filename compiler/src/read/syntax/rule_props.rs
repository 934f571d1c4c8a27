//! Property groups that several rule kinds share: per-source limits, quotas, schedules.

use crate::model::*;
use crate::read::units;

use super::parser::{Parser, Props};

impl Parser<'_, '_> {
    /// Per-source limits ([`crate::features::persource`]) of a filter rule (`action`) or a
    /// forward (`None`): filter rules say `rate-per-source=` (new connections, as `rate=`),
    /// forwards `conn-rate-per-source=` (as `conn-rate=`).
    pub(super) fn per_source(&mut self, p: &mut Props, action: Option<Action>) -> Option<PerSource> {
        use crate::features::persource as ps;
        let rule = p.rule.clone();
        let (rate_key, wrong_key) = if action.is_some() { ("rate-per-source", "conn-rate-per-source") } else { ("conn-rate-per-source", "rate-per-source") };
        if let Some((_, span)) = p.values.contains_key(wrong_key).then(|| self.text(p, wrong_key)).flatten() {
            let what = if action.is_some() { "a filter rule" } else { "a forward" };
            self.error("per-source-wrong-name", format!("`{wrong_key}` is not a property of {what}"), span, "wrong name")
                .rule(&rule)
                .help(format!("write {rate_key}=… ({} counts new connections per source, as {} does)", rate_key, if action.is_some() { "rate=" } else { "conn-rate=" }));
        }
        let rate = self.parsed(p, rate_key, units::parse_event_rate);
        let max_conns = self.number(p, "max-conns-per-source", 1, 10_000_000).map(|s| Spanned::new(s.value as u32, s.span));
        let prefix4 = self.parsed(p, "per-source-prefix4", ps::parse_prefix4);
        let prefix6 = self.parsed(p, "per-source-prefix6", ps::parse_prefix6);
        let size = self.parsed(p, "per-source-size", ps::parse_size);
        let first = [rate.as_ref().map(|x| x.span), max_conns.as_ref().map(|x| x.span)].into_iter().flatten().min_by_key(|s| s.offset);
        let Some(span) = first else {
            if let Some(span) = [prefix4.as_ref().map(|x| x.span), prefix6.as_ref().map(|x| x.span), size.as_ref().map(|x| x.span)].into_iter().flatten().next() {
                self.error("per-source-options-without-limit", "per-source-prefix/per-source-size without a per-source limit", span, "nothing to group or track")
                    .rule(&rule)
                    .help(format!("add {rate_key}=\"5/minute\" or max-conns-per-source=3, or remove the per-source-* settings"));
            }
            return None;
        };
        if let Some(a) = action.filter(|a| *a != Action::Allow) {
            self.error("per-source-on-non-allow", format!("per-source limits on a `{}` rule", a.as_str()), span, "only an allow rule admits sources")
                .rule(&rule)
                .help("a per-source limit caps what an allow rule lets in: put it on the allow rule (allow \"ssh\" proto=tcp port=22 rate-per-source=\"5/minute\"); a deny or reject already refuses every source");
            return None;
        }
        Some(PerSource {
            rate,
            max_conns,
            prefix4: prefix4.map_or(ps::DEFAULT_PREFIX4, |x| x.value),
            prefix6: prefix6.map_or(ps::DEFAULT_PREFIX6, |x| x.value),
            size: size.map_or(ps::DEFAULT_SIZE, |x| x.value),
            span,
        })
    }

    /// Traffic quota: `quota="500GB/month"` with optional `quota-reset-day=` (default: day
    /// 1 / Monday) and `over-quota=` (default `drop`); those two without `quota` are errors.
    pub(super) fn quota(&mut self, p: &mut Props, rule: &str) -> Option<Spanned<crate::features::quota::QuotaSpec>> {
        use crate::features::quota::*;
        let given = p.values.contains_key("quota");
        let quota = self.parsed(p, "quota", parse_quota);
        let day = self.text(p, "quota-reset-day");
        let over = self.parsed(p, "over-quota", parse_over_quota);
        let Some(q) = quota else {
            if !given {
                if let Some(span) = day.as_ref().map(|d| d.1).or(over.as_ref().map(|o| o.span)) {
                    self.error("quota-option-without-quota", "quota-reset-day/over-quota without quota", span, "no quota=")
                        .rule(rule)
                        .help("add quota=\"500GB/month\", or remove quota-reset-day and over-quota");
                }
            }
            return None;
        };
        let (limit_bytes, period) = q.value;
        let reset_day = match day {
            Some((text, span)) => self.convert(rule, "quota-reset-day", &text, span, |s| parse_reset_day(s, period))?.value,
            None if period == QuotaPeriod::Day => 0,
            None => 1,
        };
        let spec = QuotaSpec { limit_bytes, period, reset_day, over: over.map_or(OverQuota::Drop, |o| o.value) };
        Some(Spanned::new(spec, q.span))
    }

    /// Schedules: `during=`, `tz=`, `until=` ([`crate::features::schedule`]); `tz=` alone
    /// is an error (it says how to read the other two).
    pub(super) fn schedule(&mut self, p: &mut Props) -> Option<Schedule> {
        let during = self.parsed(p, "during", crate::features::timewindow::parse_windows);
        let tz_text = self.text(p, "tz");
        let until_text = self.text(p, "until");
        let rule = p.rule.clone();
        let tz = match &tz_text {
            Some((t, span)) => self.convert(&rule, "tz", t, *span, crate::features::timewindow::parse_zone)?,
            None => Spanned::new(crate::features::timewindow::Zone::Utc, Span::default()),
        };
        let until = match until_text {
            Some((t, span)) => {
                let end = self.convert(&rule, "until", &t, span, |x| crate::features::schedule::parse_until(x, &tz.value))?;
                Some(Spanned::new(Until { text: t, end: end.value }, span))
            }
            None => None,
        };
        if during.is_none() && until.is_none() {
            if let Some((_, span)) = tz_text {
                self.error("tz-without-schedule", "tz= without during= or until=", span, "nothing to read in this zone")
                    .rule(rule)
                    .help("tz= says how to read during=\"Mon-Fri 08:00-18:00\" and until=\"2027-01-31\"; add one of them, or remove tz=");
            }
            return None;
        }
        Some(Schedule { during, tz, until, utc: Vec::new() })
    }
}
