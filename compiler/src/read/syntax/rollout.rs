//! The `rollout { wave … probe … window … }` node and its value parsers (the checks that need the
//! whole policy are in [`crate::features::rollout`]).

use std::net::IpAddr;

use crate::read::kdl_reader::{Node as KdlNode, Value as KdlValue};
use crate::model::*;
use crate::suggest::did_you_mean;
use crate::read::units::{self, UnitError};

use super::parser::{Parser, Props};
use super::values::{looks_like_ipv4, parse_selector, valid_dns_name};

pub(super) const ROLLOUT_CHILDREN: &[&str] = &["wave", "probe", "window"];

pub(super) const WINDOW_PROPS: &[&str] = &["allow", "deny", "tz"];

pub(super) const WAVE_PROPS: &[&str] = &["on", "percent", "soak", "max-unavailable", "max-parallel"];

pub(super) const ROLLOUT_PROPS: &[&str] = &["on-failure", "missing-timeout", "self-check-attempts", "self-check-spacing"];

pub(super) const GATE_PROPS: &[&str] = &["query", "max", "min", "allow-empty", "grace"];

pub(super) const PROBE_PROPS: &[&str] = &["tcp", "http"];

impl Parser<'_, '_> {
    /// `rollout { wave … probe … }`: the fleet rollout policy. Values are read here; the rules
    /// that need the whole policy (one block, unique names, the last wave) are in
    /// [`crate::features::rollout::check`].
    pub(super) fn rollout(&mut self, node: &KdlNode) -> RolloutDecl {
        let rule = "rollout";
        // A name is a mistake of its own (the policy is one per repository); the properties
        // are read below, so only the positional arguments are reported here.
        let names: Vec<_> = node.entries().iter().filter(|e| e.name().is_none()).collect();
        for e in &names {
            let span = self.span(e.span());
            self.error("unexpected-argument", "`rollout` takes no name", span, "not expected here")
                .rule(rule)
                .help("the policy is its properties and its block: rollout on-failure=\"halt\" { wave \"canary\" on=\"role=canary\"; wave \"all\" }");
        }
        let mut p = self.props(node, rule, ROLLOUT_PROPS, names.len());
        let on_failure = self.text(&mut p, "on-failure").and_then(|(t, s)| self.rollout_value(rule, "on-failure", &t, s, parse_on_failure));
        let missing_timeout_secs = self.text(&mut p, "missing-timeout").and_then(|(t, s)| self.rollout_value(rule, "missing-timeout", &t, s, parse_soak));
        let self_check_attempts = self.number(&mut p, "self-check-attempts", 1, 10);
        let self_check_spacing_ms = self.text(&mut p, "self-check-spacing").and_then(|(t, s)| self.rollout_value(rule, "self-check-spacing", &t, s, parse_self_check_spacing));
        let mut decl = RolloutDecl {
            waves: Vec::new(),
            probes: Vec::new(),
            windows: Vec::new(),
            on_failure,
            missing_timeout_secs,
            self_check_attempts,
            self_check_spacing_ms,
            span: self.span(node.name().span()),
        };
        for child in node.children().map(|d| d.nodes()).unwrap_or_default() {
            match child.name().value() {
                "wave" => {
                    if let Some(w) = self.wave(child) {
                        decl.waves.push(w);
                    }
                }
                "probe" => {
                    if let Some(p) = self.probe(child) {
                        decl.probes.push(p);
                    }
                }
                "window" => {
                    if let Some(w) = self.window(child) {
                        decl.windows.push(w);
                    }
                }
                other => {
                    let span = self.span(child.name().span());
                    let help = match did_you_mean(other, ROLLOUT_CHILDREN.iter().copied()) {
                        _ if other == "gate" => "a gate belongs to a wave: wave \"canary\" on=\"role=canary\" { gate \"errors\" query=\"…\" max=0.01 }".into(),
                        Some(s) => format!("did you mean `{s}`?"),
                        None => "a rollout block holds `wave \"name\" …` nodes (in promotion order), `probe \"name\" …` and `window allow=\"…\"` / `window deny=\"…\"` nodes".into(),
                    };
                    self.error("unknown-node", format!("unknown node `{other}` in the rollout block"), span, "here").rule(rule).help(help);
                }
            }
        }
        decl
    }

    pub(super) fn wave(&mut self, node: &KdlNode) -> Option<WaveDecl> {
        let name = self.name(node, "wave")?;
        let rule = format!("wave \"{}\"", name.value);
        let mut p = self.props(node, &rule, WAVE_PROPS, 1);
        let on = self.text(&mut p, "on").and_then(|(t, s)| self.rollout_value(&rule, "on", &t, s, |t| parse_selector(t).map(|sel| (sel, t.to_string()))));
        let percent = self.text(&mut p, "percent").and_then(|(t, s)| self.rollout_value(&rule, "percent", &t, s, parse_percent));
        let soak_secs = self.text(&mut p, "soak").and_then(|(t, s)| self.rollout_value(&rule, "soak", &t, s, parse_soak));
        let max_unavailable = self.text(&mut p, "max-unavailable").and_then(|(t, s)| self.rollout_value(&rule, "max-unavailable", &t, s, parse_max_unavailable));
        let max_parallel = self.text(&mut p, "max-parallel").and_then(|(t, s)| self.rollout_value(&rule, "max-parallel", &t, s, parse_max_parallel));
        let mut gates = Vec::new();
        for child in node.children().map(|d| d.nodes()).unwrap_or_default() {
            if child.name().value() == "gate" {
                gates.extend(self.gate(child, &name.value));
                continue;
            }
            let other = child.name().value();
            let span = self.span(child.name().span());
            let help = match did_you_mean(other, ["gate"].into_iter()) {
                Some(s) => format!("did you mean `{s}`?"),
                None if other == "probe" => "probes are for the whole fleet: put `probe \"name\" …` directly in the rollout block".into(),
                None => "a wave's block holds `gate \"name\" query=\"…\" max=…` nodes".into(),
            };
            self.error("unknown-node", format!("unknown node `{other}` in a wave"), span, "here").rule(&rule).help(help);
        }
        Some(WaveDecl { name, on, percent, soak_secs, max_unavailable, max_parallel, gates, span: self.span(node.span()) })
    }

    pub(super) fn gate(&mut self, node: &KdlNode, wave: &str) -> Option<GateDecl> {
        let name = self.name(node, "gate")?;
        let rule = format!("gate \"{}\" of wave \"{wave}\"", name.value);
        let mut p = self.props(node, &rule, GATE_PROPS, 1);
        self.no_children(node, &rule);
        let query = self.required(&mut p, "query", "\"sum(rate(http_requests_errors_total[5m]))\"").map(|(t, s)| Spanned::new(t, s));
        let max = self.threshold(&mut p, "max", &rule);
        let min = self.threshold(&mut p, "min", &rule);
        let allow_empty = self.bool(&mut p, "allow-empty");
        let grace_secs = self.text(&mut p, "grace").and_then(|(t, s)| self.rollout_value(&rule, "grace", &t, s, parse_soak));
        let span = self.span(node.span());
        let given = |k: &str| node.entries().iter().any(|e| e.name().is_some_and(|id| id.value() == k));
        match (&max, &min) {
            (Some(_), Some(m)) => {
                self.error("rollout-gate-threshold", "a gate takes max= or min=, not both", m.span, "second threshold")
                    .rule(&rule)
                    .help("a gate compares every sample with one threshold: max=0.01 (at most) or min=0.99 (at least); for a band, write two gates");
            }
            (None, None) if !given("max") && !given("min") => {
                let at = self.span(node.name().span());
                self.error("rollout-gate-threshold", "this gate has no threshold", at, "max= or min= missing")
                    .rule(&rule)
                    .help("add max=0.01 (every sample at most 0.01) or min=0.99 (every sample at least 0.99)");
            }
            _ => {}
        }
        Some(GateDecl { name, query, max, min, allow_empty, grace_secs, span })
    }

    /// `max=0.01` / `min=1`: a finite number (a KDL number, or a string holding one).
    pub(super) fn threshold(&mut self, props: &mut Props, key: &str, rule: &str) -> Option<Spanned<f64>> {
        let e = props.get(key)?;
        let span = self.span(e.span());
        let n = match e.value() {
            KdlValue::Integer(i) => Some(*i as f64),
            KdlValue::Float(f) => Some(*f),
            KdlValue::String(s) => s.trim().parse::<f64>().ok(),
            _ => None,
        };
        match n {
            Some(n) if n.is_finite() => Some(Spanned::new(n, span)),
            _ => {
                self.error("rollout-bad-threshold", format!("bad {key}: expected a number"), span, "this value")
                    .rule(rule)
                    .help(format!("write {key}=0.01 (a plain number; the gate's query should return the value to compare, e.g. a ratio)"));
                None
            }
        }
    }

    pub(super) fn probe(&mut self, node: &KdlNode) -> Option<ProbeDecl> {
        let name = self.name(node, "probe")?;
        let rule = format!("probe \"{}\"", name.value);
        let mut p = self.props(node, &rule, PROBE_PROPS, 1);
        self.no_children(node, &rule);
        let n = name.value.clone();
        let tcp = self.text(&mut p, "tcp").and_then(|(t, s)| self.rollout_value(&rule, "tcp", &t, s, |t| parse_probe_tcp(&n, t)));
        let http = self.text(&mut p, "http").and_then(|(t, s)| self.rollout_value(&rule, "http", &t, s, |t| parse_probe_http(&n, t)));
        let has = |k: &str| node.entries().iter().any(|e| e.name().is_some_and(|id| id.value() == k));
        let probe = match (has("tcp"), has("http")) {
            (true, true) => {
                let span = self.span(node.span());
                self.error("rollout-probe-kind", "a probe is tcp= or http=, not both", span, "this probe")
                    .rule(&rule)
                    .help("write two probes: probe \"api\" tcp=\"198.18.0.1:443\" and probe \"health\" http=\"http://127.0.0.1:8080/healthz\"");
                None
            }
            (false, false) => {
                let span = self.span(node.name().span());
                self.error("rollout-probe-kind", "this probe checks nothing", span, "tcp= or http= missing")
                    .rule(&rule)
                    .help("write tcp=\"198.18.0.1:443\" (a TCP connect) or http=\"http://127.0.0.1:8080/healthz\" (a GET that must answer 2xx)");
                None
            }
            _ => tcp.or(http),
        };
        Some(ProbeDecl { name, probe, span: self.span(node.span()) })
    }

    /// `window allow="Mon-Fri 09:00-17:00" tz="+01:00"` (or `deny=`): a promotion window; the
    /// spec and the zone are parsed by [`parse_window_spec`] / [`parse_window_tz`].
    pub(super) fn window(&mut self, node: &KdlNode) -> Option<Spanned<fwc_artifacts::rollout::Window>> {
        let rule = "window";
        let mut p = self.props(node, rule, WINDOW_PROPS, 0);
        self.no_children(node, rule);
        let allow = self.text(&mut p, "allow");
        let deny = self.text(&mut p, "deny");
        let tz = self.text(&mut p, "tz");
        let span = self.span(node.span());
        let given = |k: &str| node.entries().iter().any(|e| e.name().is_some_and(|id| id.value() == k));
        let (is_allow, (text, at)) = match (allow, deny) {
            (Some(a), None) => (true, a),
            (None, Some(d)) => (false, d),
            (Some(_), Some(_)) => {
                self.error("rollout-window", "a window is allow= or deny=, not both", span, "this window")
                    .rule(rule)
                    .help("write two windows: window allow=\"Mon-Fri 09:00-17:00\" and window deny=\"Fri 15:00-24:00\"");
                return None;
            }
            (None, None) => {
                if !given("allow") && !given("deny") {
                    let at = self.span(node.name().span());
                    self.error("rollout-window", "this window has neither allow= nor deny=", at, "allow= or deny= missing")
                        .rule(rule)
                        .help("write window allow=\"Mon-Fri 09:00-17:00\" (promote only then) or window deny=\"Fri 15:00-24:00\" (never promote then)");
                }
                return None;
            }
        };
        let key = if is_allow { "allow" } else { "deny" };
        let spec = self.convert_as("rollout-window", rule, key, &text, at, parse_window_spec)?;
        let (offset, zone) = match tz {
            Some((t, s)) => self.convert_as("rollout-window", rule, "tz", &t, s, parse_window_tz)?.value,
            None => (0, None),
        };
        let (days, start_min, end_min) = spec.value;
        let window = fwc_artifacts::window::DayWindow { days, start_min, end_min };
        Some(Spanned::new(fwc_artifacts::rollout::Window { allow: is_allow, window, offset_min: offset, tz: zone }, span))
    }

    /// [`Parser::convert`] with a `rollout-bad-<key>` code.
    pub(super) fn rollout_value<T>(&mut self, rule: &str, key: &str, text: &str, span: Span, f: impl Fn(&str) -> Result<T, UnitError>) -> Option<Spanned<T>> {
        self.convert_as(&format!("rollout-bad-{key}"), rule, key, text, span, f)
    }
}

/// `percent=50` (or `"50%"`): a whole percentage from 1 to 100.
pub(super) fn parse_percent(s: &str) -> Result<u8, UnitError> {
    let help = "write percent=10 (a whole number from 1 to 100; percentages are cumulative: percent=10 then percent=50 reach 10% then 50% of the hosts left)";
    match s.trim().trim_end_matches('%').trim().parse::<u32>() {
        Ok(n @ 1..=100) => Ok(n as u8),
        Ok(n) => Err(UnitError { message: format!("{n} is not from 1 to 100"), help: help.into() }),
        Err(_) => Err(UnitError { message: format!("\"{s}\" is not a whole percentage"), help: help.into() }),
    }
}

/// `soak="10m"`: a duration in whole seconds.
pub(super) fn parse_soak(s: &str) -> Result<u64, UnitError> {
    let ms = units::parse_duration_ms(s)?;
    if ms % 1000 != 0 {
        return Err(UnitError { message: format!("\"{s}\" is not a whole number of seconds"), help: "write soak=\"30s\", \"10m\" or \"1h\"".into() });
    }
    Ok(ms / 1000)
}

/// `self-check-spacing="1s"`: the pause before the self-check's second attempt (it doubles after
/// each failure), from 100 ms to 1 min; in milliseconds.
pub(super) fn parse_self_check_spacing(s: &str) -> Result<u64, UnitError> {
    let ms = units::parse_duration_ms(s)?;
    if !(100..=60_000).contains(&ms) {
        return Err(UnitError {
            message: format!("\"{s}\" is not from 100ms to 1m"),
            help: "write self-check-spacing=\"1s\" (the pause before the second attempt; it doubles after each failure)".into(),
        });
    }
    Ok(ms)
}

/// A count of hosts (`2`) or a share of a wave (`"10%"`, from `min_percent` to 100%): the value
/// of `max-unavailable=` and `max-parallel=`. Ok(Err(n)) is a count, Ok(Ok(p)) a percentage.
pub(super) fn parse_count_or_percent(s: &str, min_percent: u32, help: &str) -> Result<Result<u8, u32>, UnitError> {
    let bad = |m: String| UnitError { message: m, help: help.into() };
    let t = s.trim();
    if let Some(p) = t.strip_suffix('%') {
        return match p.trim().parse::<u32>() {
            Ok(n) if (min_percent..=100).contains(&n) => Ok(Ok(n as u8)),
            _ => Err(bad(format!("\"{s}\" is not a percentage from {min_percent}% to 100%"))),
        };
    }
    t.parse::<u32>().map(Err).map_err(|_| bad(format!("\"{s}\" is not a number of hosts or a percentage")))
}

/// `max-unavailable=2` (hosts) or `max-unavailable="10%"` (of the wave's hosts).
pub(super) fn parse_max_unavailable(s: &str) -> Result<fwc_artifacts::rollout::MaxUnavailable, UnitError> {
    use fwc_artifacts::rollout::MaxUnavailable;
    let help = "write max-unavailable=2 (hosts of the wave that may be missing) or max-unavailable=\"10%\" (of the wave's hosts)";
    Ok(match parse_count_or_percent(s, 0, help)? {
        Ok(p) => MaxUnavailable::Percent(p),
        Err(n) => MaxUnavailable::Hosts(n),
    })
}

/// `max-parallel=50` (hosts of the wave applying at once) or `max-parallel="25%"` (of the wave).
pub(super) fn parse_max_parallel(s: &str) -> Result<fwc_artifacts::rollout::MaxParallel, UnitError> {
    use fwc_artifacts::rollout::MaxParallel;
    let help = "write max-parallel=50 (at most 50 hosts of the wave apply at once) or max-parallel=\"25%\" (of the wave's hosts)";
    match parse_count_or_percent(s, 1, help)? {
        Ok(p) => Ok(MaxParallel::Percent(p)),
        Err(0) => Err(UnitError { message: "max-parallel=0 would never apply the wave".into(), help: help.into() }),
        Err(n) => Ok(MaxParallel::Hosts(n)),
    }
}

/// `on-failure="halt"` (hosts keep what they have) or `"rollback"` (promoted hosts go back to stable).
pub(super) fn parse_on_failure(s: &str) -> Result<fwc_artifacts::rollout::OnFailure, UnitError> {
    use fwc_artifacts::rollout::OnFailure;
    match s.trim() {
        "halt" => Ok(OnFailure::Halt),
        "rollback" => Ok(OnFailure::Rollback),
        other => Err(UnitError {
            message: format!("\"{other}\" is not halt or rollback"),
            help: "write on-failure=\"halt\" (a failure stops the rollout; promoted hosts keep the commit) or on-failure=\"rollback\" (they go back to the stable commit)".into(),
        }),
    }
}

/// `tcp="198.18.0.1:443"`, `"[2001:db8::1]:443"` or `"git.example.com:22"`.
pub(super) fn parse_probe_tcp(name: &str, s: &str) -> Result<fwc_artifacts::rollout::Probe, UnitError> {
    let help = "write tcp=\"198.18.0.1:443\", \"[2001:db8::1]:443\" or \"git.example.com:22\" (an address or DNS name and a port)";
    let bad = |m: String| UnitError { message: m, help: help.into() };
    let (host, port) = match s.strip_prefix('[') {
        Some(rest) => rest.split_once("]:").ok_or_else(|| bad(format!("\"{s}\" has no port")))?,
        None => s.rsplit_once(':').ok_or_else(|| bad(format!("\"{s}\" has no port")))?,
    };
    let ok_host = host.parse::<IpAddr>().is_ok() || (!looks_like_ipv4(host) && valid_dns_name(host) && !host.contains(':'));
    if !ok_host {
        return Err(bad(format!("\"{host}\" is neither an IP address nor a DNS name")));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(fwc_artifacts::rollout::Probe::Tcp { name: name.into(), address: s.into() }),
        _ => Err(bad(format!("\"{port}\" is not a port from 1 to 65535"))),
    }
}

/// `http="http://127.0.0.1:8080/healthz"`: plain HTTP (the agent has no TLS client).
pub(super) fn parse_probe_http(name: &str, s: &str) -> Result<fwc_artifacts::rollout::Probe, UnitError> {
    let help = "write http=\"http://127.0.0.1:8080/healthz\" (a GET that must answer 2xx)";
    if s.starts_with("https://") {
        return Err(UnitError { message: format!("\"{s}\" is HTTPS; probes speak plain HTTP"), help: "probe a plain-HTTP health endpoint (for a TLS port, a tcp= probe checks that it accepts connections)".into() });
    }
    let Some(rest) = s.strip_prefix("http://") else {
        return Err(UnitError { message: format!("\"{s}\" is not an http:// URL"), help: help.into() });
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.is_empty() || authority.contains(['@', ' ']) {
        return Err(UnitError { message: format!("\"{s}\" names no host"), help: help.into() });
    }
    Ok(fwc_artifacts::rollout::Probe::Http { name: name.into(), url: s.into() })
}

/// A window's `allow=`/`deny=` text, `"Mon-Fri 09:00-17:00"`: (days 0 = Monday, ascending;
/// start and end in minutes after midnight, `24:00` = 1440 allowed as the end). Read by the
/// shared [`crate::features::timewindow`] parser; a promotion window is one window within one day.
pub(crate) fn parse_window_spec(s: &str) -> Result<(Vec<u8>, u16, u16), crate::read::units::UnitError> {
    let bad = |m: String, help: &str| crate::read::units::UnitError { message: m, help: help.into() };
    let windows = crate::features::timewindow::parse_windows(s)?;
    let [w] = windows.as_slice() else {
        return Err(bad(format!("\"{s}\" holds {} windows", windows.len()), "a window node holds one window: write one `window allow=\"…\"` per window"));
    };
    let end = if w.end_min == 0 { 1440 } else { w.end_min };
    if end <= w.start_min {
        let hm = |m: u16| format!("{:02}:{:02}", m / 60, m % 60);
        return Err(bad(
            format!("the window {}-{} ends before it starts", hm(w.start_min), hm(w.end_min)),
            "a window lies within one day; for one that crosses midnight write two: window allow=\"Fri 22:00-24:00\" and window allow=\"Sat 00:00-02:00\"",
        ));
    }
    Ok((w.days.clone(), w.start_min, end))
}

/// A window's `tz=`: `"UTC"`, a fixed offset `"+01:00"` / `"-05:30"` (minutes east of UTC), or
/// a named zone of the tz database (`"Europe/Berlin"`, daylight saving followed), read by the
/// shared [`crate::features::timewindow::parse_zone`]: (offset, zone name).
pub(crate) fn parse_window_tz(s: &str) -> Result<(i16, Option<String>), crate::read::units::UnitError> {
    Ok(crate::features::timewindow::promotion_zone_fields(&crate::features::timewindow::parse_zone(s)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_values() {
        assert!(parse_window_spec("Mon 00:00-24:00").is_ok());
        for bad in ["Mon", "Mon 9:00-17:00", "Mon 09:00-17:00 x", "Mun 09:00-17:00", "Mon 17:00-09:00", "Mon 09:00-09:00", "Mon 24:00-24:00", "Mon 09:00-24:01", "Mon 09:60-10:00"] {
            assert!(parse_window_spec(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_window_tz("UTC").unwrap(), (0, None));
        assert_eq!(parse_window_tz("+01:00").unwrap(), (60, None));
        assert_eq!(parse_window_tz("-05:30").unwrap(), (-330, None));
        assert!(parse_window_tz("+0530").is_err());
        assert!(parse_window_tz("+15:00").is_err());
        // Named zones (daylight saving followed), with a suggestion for a misspelled one.
        assert_eq!(parse_window_tz("Europe/Berlin").unwrap(), (0, Some("Europe/Berlin".to_string())));
        let e = parse_window_tz("Europe/Berln").unwrap_err();
        assert!(e.message.contains("unknown time zone") && e.help.contains("did you mean \"Europe/Berlin\""), "{e:?}");
    }
}
