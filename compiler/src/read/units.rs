//! Parsing of the value mini-languages inside rule properties: bandwidths (`10mbit`,
//! `1MiB/s`), sizes (`64KiB`), durations (`30s`), event rates (`50/second`), ports and port
//! lists (`80,443,8000-8100`), addresses (`10.0.0.0/8`, `10.0.0.1-10.0.0.9`), ICMP types as nft
//! spells them (`echo-request`), conntrack states, reject kinds, log prefixes. Errors carry a
//! message and a hint; the caller attaches the span.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::model::{AddrElem, Bandwidth, CtState, EventRate, PortRange, RejectWith, TimeUnit};

/// A value that did not parse: what is wrong, and how to write it instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitError {
    pub message: String,
    pub help: String,
}

impl std::fmt::Display for UnitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.help)
    }
}

impl std::error::Error for UnitError {}

fn err<T>(message: impl Into<String>, help: impl Into<String>) -> Result<T, UnitError> {
    Err(UnitError { message: message.into(), help: help.into() })
}

/// Split `"1.5gbit"` into (`1.5`, `"gbit"`).
fn split_number(s: &str) -> Option<(f64, &str)> {
    let end = s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_')).unwrap_or(s.len());
    let (num, unit) = s.split_at(end);
    let num: f64 = num.replace('_', "").parse().ok()?;
    (num.is_finite() && num >= 0.0).then_some((num, unit.trim()))
}

const BANDWIDTH_HELP: &str =
    "write bits per second as 500kbit, 10mbit, 1.5gbit, or bytes per second as 10MB/s, 1MiB/s";

/// Bandwidth -> bytes per second. Bits (`kbit`, `mbit`, `gbit`, `tbit`, SI) or bytes per
/// second (`KB/s`, `MB/s`, `GB/s` SI; `KiB/s`, `MiB/s`, `GiB/s` binary). `mbps`-style units
/// are refused: people read them both as megabits and megabytes.
pub fn parse_bandwidth(s: &str) -> Result<Bandwidth, UnitError> {
    let Some((n, unit)) = split_number(s.trim()) else {
        return err(format!("\"{s}\" is not a bandwidth"), BANDWIDTH_HELP);
    };
    let lower = unit.to_ascii_lowercase();
    if lower.ends_with("bps") {
        let prefix = &unit[..unit.len() - 3];
        return err(
            format!("\"{s}\" is ambiguous: \"{unit}\" is read as bits by some and bytes by others"),
            format!("write {n}{}bit for bits per second or {n}{}B/s for bytes per second", prefix.to_ascii_lowercase(), prefix.to_ascii_uppercase()),
        );
    }
    let bytes_per_sec = match unit {
        "bit" => n / 8.0,
        "kbit" => n * 1e3 / 8.0,
        "mbit" => n * 1e6 / 8.0,
        "gbit" => n * 1e9 / 8.0,
        "tbit" => n * 1e12 / 8.0,
        "B/s" => n,
        "KB/s" | "kB/s" => n * 1e3,
        "MB/s" => n * 1e6,
        "GB/s" => n * 1e9,
        "KiB/s" => n * 1024.0,
        "MiB/s" => n * 1024.0 * 1024.0,
        "GiB/s" => n * 1024.0 * 1024.0 * 1024.0,
        "" => return err(format!("\"{s}\" has no unit"), BANDWIDTH_HELP),
        _ => return err(format!("unknown bandwidth unit \"{unit}\" in \"{s}\""), BANDWIDTH_HELP),
    };
    if bytes_per_sec < 1.0 {
        return err(format!("bandwidth \"{s}\" is below 1 byte per second"), BANDWIDTH_HELP);
    }
    Ok(Bandwidth(bytes_per_sec.round() as u64))
}

const SIZE_HELP: &str = "write a size as 1500, 64KiB, 256KB, 1MiB, 1MB";

/// Size -> bytes (`64KiB`, `1MB`, or a plain number of bytes).
pub fn parse_size(s: &str) -> Result<u64, UnitError> {
    let Some((n, unit)) = split_number(s.trim()) else {
        return err(format!("\"{s}\" is not a size"), SIZE_HELP);
    };
    let mult = match unit {
        "" | "B" => 1.0,
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "kbit" | "mbit" | "gbit" => return err(format!("\"{s}\" is a rate, a size is wanted here"), SIZE_HELP),
        _ => return err(format!("unknown size unit \"{unit}\" in \"{s}\""), SIZE_HELP),
    };
    Ok((n * mult).round() as u64)
}

const DURATION_HELP: &str = "write a duration as 500ms, 30s, 5m, 2h or 1d";

/// Duration -> milliseconds (`500ms`, `30s`, `5m`, `2h`, `1d`).
pub fn parse_duration_ms(s: &str) -> Result<u64, UnitError> {
    let Some((n, unit)) = split_number(s.trim()) else {
        return err(format!("\"{s}\" is not a duration"), DURATION_HELP);
    };
    let mult = match unit {
        "ms" => 1.0,
        "s" => 1e3,
        "m" | "min" => 60e3,
        "h" => 3600e3,
        "d" => 86400e3,
        "" => return err(format!("\"{s}\" has no unit"), DURATION_HELP),
        _ => return err(format!("unknown duration unit \"{unit}\" in \"{s}\""), DURATION_HELP),
    };
    let ms = (n * mult).round() as u64;
    if ms == 0 {
        return err(format!("duration \"{s}\" is zero"), DURATION_HELP);
    }
    Ok(ms)
}

const RATE_HELP: &str = "write a rate as 50/second, 10/minute, 1000/hour (optionally \"50/second burst 100\")";

/// Event rate (`50/second`, `10/minute burst 20`, short units `s`, `min`, `h`, `d`).
pub fn parse_event_rate(s: &str) -> Result<EventRate, UnitError> {
    let mut words = s.split_whitespace();
    let head = words.next().unwrap_or("");
    let Some((count, unit)) = head.split_once('/') else {
        return err(format!("\"{s}\" is not a rate"), RATE_HELP);
    };
    let Ok(count) = count.parse::<u32>() else {
        return err(format!("\"{count}\" in \"{s}\" is not a whole number"), RATE_HELP);
    };
    if count == 0 {
        return err(format!("rate \"{s}\" is zero"), RATE_HELP);
    }
    let per = match unit {
        "second" | "s" | "sec" => TimeUnit::Second,
        "minute" | "min" | "m" => TimeUnit::Minute,
        "hour" | "h" => TimeUnit::Hour,
        "day" | "d" => TimeUnit::Day,
        _ => return err(format!("unknown time unit \"{unit}\" in \"{s}\""), RATE_HELP),
    };
    let burst = match (words.next(), words.next(), words.next()) {
        (None, _, _) => None,
        (Some("burst"), Some(b), None) => match b.parse::<u32>() {
            Ok(b) if b > 0 => Some(b),
            _ => return err(format!("burst \"{b}\" in \"{s}\" is not a positive whole number"), RATE_HELP),
        },
        _ => return err(format!("unexpected text after the rate in \"{s}\""), RATE_HELP),
    };
    Ok(EventRate { count, per, burst })
}

const PORT_HELP: &str = "write ports as 22, \"80,443\" or \"8000-8100\" (1-65535)";

fn parse_port(s: &str, whole: &str) -> Result<u16, UnitError> {
    match s.trim().parse::<u32>() {
        Ok(p) if (1..=65535).contains(&p) => Ok(p as u16),
        Ok(p) => err(format!("port {p} in \"{whole}\" is out of range"), PORT_HELP),
        Err(_) => err(format!("\"{}\" in \"{whole}\" is not a port number", s.trim()), PORT_HELP),
    }
}

/// One port or an inclusive range (`8000-8100`).
pub fn parse_port_range(s: &str) -> Result<PortRange, UnitError> {
    match s.split_once('-') {
        Some((a, b)) => {
            let (lo, hi) = (parse_port(a, s)?, parse_port(b, s)?);
            if lo > hi {
                return err(format!("port range \"{s}\" runs backwards"), format!("write {hi}-{lo}"));
            }
            Ok(PortRange { lo, hi })
        }
        None => Ok(PortRange::single(parse_port(s, s)?)),
    }
}

/// A comma-separated port list (`"80,443,8000-8100"`); sorted, overlapping entries merged.
pub fn parse_port_list(s: &str) -> Result<Vec<PortRange>, UnitError> {
    let mut out = Vec::new();
    for part in s.split(',') {
        if part.trim().is_empty() {
            return err(format!("empty entry in port list \"{s}\""), PORT_HELP);
        }
        out.push(parse_port_range(part.trim())?);
    }
    out.sort();
    let mut merged: Vec<PortRange> = Vec::new();
    for r in out {
        match merged.last_mut() {
            Some(last) if u32::from(r.lo) <= u32::from(last.hi) + 1 => last.hi = last.hi.max(r.hi),
            _ => merged.push(r),
        }
    }
    Ok(merged)
}

const ADDR_HELP: &str = "write an address as 192.0.2.1, 10.0.0.0/8, 2001:db8::/32 or a range 10.0.0.1-10.0.0.9";

/// One address element: IP, CIDR or range.
pub fn parse_addr(s: &str) -> Result<AddrElem, UnitError> {
    let s = s.trim();
    if let Some((a, b)) = s.split_once('-') {
        let (Ok(a), Ok(b)) = (a.trim().parse::<IpAddr>(), b.trim().parse::<IpAddr>()) else {
            return err(format!("\"{s}\" is not an address range"), ADDR_HELP);
        };
        if a.is_ipv4() != b.is_ipv4() {
            return err(format!("range \"{s}\" mixes IPv4 and IPv6"), ADDR_HELP);
        }
        if a > b {
            return err(format!("address range \"{s}\" runs backwards"), format!("write {b}-{a}"));
        }
        return Ok(AddrElem::Range(a, b));
    }
    if s.contains('/') {
        return match s.parse::<IpNet>() {
            Ok(net) if net.trunc() != net => err(
                format!("\"{s}\" has host bits set"),
                format!("did you mean {}? (the network of {s})", net.trunc()),
            ),
            Ok(net) => Ok(AddrElem::Net(net)),
            Err(_) => err(format!("\"{s}\" is not a valid network"), ADDR_HELP),
        };
    }
    match s.parse::<IpAddr>() {
        Ok(a) => Ok(AddrElem::Net(IpNet::from(a))),
        Err(_) => err(format!("\"{s}\" is not an IP address"), ADDR_HELP),
    }
}

/// ICMP type names as nft spells them (`nft describe icmp type`).
pub const ICMP_TYPES: &[(&str, u8)] = &[
    ("echo-reply", 0),
    ("destination-unreachable", 3),
    ("source-quench", 4),
    ("redirect", 5),
    ("echo-request", 8),
    ("router-advertisement", 9),
    ("router-solicitation", 10),
    ("time-exceeded", 11),
    ("parameter-problem", 12),
    ("timestamp-request", 13),
    ("timestamp-reply", 14),
    ("info-request", 15),
    ("info-reply", 16),
    ("address-mask-request", 17),
    ("address-mask-reply", 18),
];

/// ICMPv6 type names as nft spells them (`nft describe icmpv6 type`); the first name of a
/// number is the one nft lists.
pub const ICMPV6_TYPES: &[(&str, u8)] = &[
    ("destination-unreachable", 1),
    ("packet-too-big", 2),
    ("time-exceeded", 3),
    ("parameter-problem", 4),
    ("echo-request", 128),
    ("echo-reply", 129),
    ("mld-listener-query", 130),
    ("mld-listener-report", 131),
    ("mld-listener-done", 132),
    ("mld-listener-reduction", 132),
    ("nd-router-solicit", 133),
    ("nd-router-advert", 134),
    ("nd-neighbor-solicit", 135),
    ("nd-neighbor-advert", 136),
    ("nd-redirect", 137),
    ("router-renumbering", 138),
    ("ind-neighbor-solicit", 141),
    ("ind-neighbor-advert", 142),
    ("mld2-listener-report", 143),
];

fn icmp_table(v6: bool) -> &'static [(&'static str, u8)] {
    if v6 {
        ICMPV6_TYPES
    } else {
        ICMP_TYPES
    }
}

/// The name nft gives ICMP (`v6`: ICMPv6) type `code`, if it has one.
pub fn icmp_type_name(v6: bool, code: u8) -> Option<&'static str> {
    icmp_table(v6).iter().find(|(_, c)| *c == code).map(|(n, _)| *n)
}

/// The number of the ICMP (`v6`: ICMPv6) type called `name` by nft.
pub fn icmp_type_code(v6: bool, name: &str) -> Option<u8> {
    icmp_table(v6).iter().find(|(n, _)| *n == name).map(|(_, c)| *c)
}

/// `"echo-request,echo-reply"` or numbers (`"8"`, `"0-255"` is not a type): ICMP types of
/// the family `v6` says, as numbers, sorted, without duplicates.
pub fn parse_icmp_types(s: &str, v6: bool) -> Result<Vec<u8>, UnitError> {
    let (proto, other) = if v6 { ("icmpv6", "icmp") } else { ("icmp", "icmpv6") };
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim) {
        if let Ok(n) = part.parse::<u8>() {
            out.push(n);
            continue;
        }
        if let Some(c) = icmp_type_code(v6, part) {
            out.push(c);
            continue;
        }
        if part.is_empty() {
            return err("an empty ICMP type", format!("write icmp-type=\"echo-request\" or a comma list: \"echo-request,echo-reply\" (proto={proto})"));
        }
        if icmp_type_code(!v6, part).is_some() {
            return err(
                format!("\"{part}\" is an {other} type, and this rule is proto={proto}"),
                format!("use proto={other} for {other} types (or split the rule in two, one per family)"),
            );
        }
        let names = icmp_table(v6).iter().map(|(n, _)| *n);
        let help = match crate::suggest::did_you_mean(part, names) {
            Some(m) => format!("did you mean \"{m}\"? {proto} types are nft's names ({}) or numbers 0-255", list_names(v6)),
            None => format!("{proto} types are nft's names ({}) or numbers 0-255", list_names(v6)),
        };
        return err(format!("\"{part}\" is not an {proto} type"), help);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

fn list_names(v6: bool) -> String {
    let mut names: Vec<&str> = icmp_table(v6).iter().map(|(n, _)| *n).collect();
    names.dedup();
    names.join(", ")
}

/// `state="new"` or `"established,related"`: conntrack states, sorted, without duplicates.
pub fn parse_ct_states(s: &str) -> Result<Vec<CtState>, UnitError> {
    let all = || CtState::ALL.iter().map(|c| c.as_str());
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim) {
        match CtState::ALL.iter().find(|c| c.as_str() == part) {
            Some(c) => out.push(*c),
            None => {
                let names = all().collect::<Vec<_>>().join(", ");
                let help = match crate::suggest::did_you_mean(part, all()) {
                    Some(m) => format!("did you mean \"{m}\"? states are {names} (comma separated)"),
                    None => format!("states are {names} (comma separated), e.g. state=\"new\""),
                };
                return err(format!("\"{part}\" is not a connection state"), help);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// `reject-with="admin-prohibited"` and the other [`RejectWith`] kinds.
pub fn parse_reject_with(s: &str) -> Result<RejectWith, UnitError> {
    if let Some(r) = RejectWith::ALL.iter().find(|r| r.as_str() == s) {
        return Ok(*r);
    }
    let names = || RejectWith::ALL.iter().map(|r| r.as_str());
    // iptables' and firewalld's spellings.
    let alias = match s {
        "tcp-rst" | "tcp reset" => Some("tcp-reset"),
        "icmp-port-unreachable" | "icmp6-port-unreachable" | "icmpx-port-unreachable" => Some("port-unreachable"),
        "icmp-host-unreachable" | "icmp6-addr-unreachable" | "addr-unreachable" => Some("host-unreachable"),
        "icmp-net-unreachable" | "icmp6-no-route" | "no-route" => Some("net-unreachable"),
        "icmp-admin-prohibited" | "icmp6-adm-prohibited" | "adm-prohibited" => Some("admin-prohibited"),
        "icmp-proto-unreachable" | "proto-unreachable" => Some("prot-unreachable"),
        _ => None,
    };
    let all = names().collect::<Vec<_>>().join(", ");
    let help = match alias.or_else(|| crate::suggest::did_you_mean(s, names())) {
        Some(m) => format!("did you mean \"{m}\"? reject-with is one of: {all}"),
        None => format!("reject-with is one of: {all}"),
    };
    err(format!("\"{s}\" is not a way to reject"), help)
}

/// Longest `log-prefix` nft accepts (bytes).
pub const MAX_LOG_PREFIX: usize = 127;

/// `log-prefix="SSH "`: printable text, at most [`MAX_LOG_PREFIX`] bytes.
pub fn parse_log_prefix(s: &str) -> Result<String, UnitError> {
    let help = format!("write printable text of at most {MAX_LOG_PREFIX} bytes, e.g. log-prefix=\"SSH: \"");
    if s.is_empty() {
        return err("an empty log prefix", help);
    }
    if s.len() > MAX_LOG_PREFIX {
        return err(format!("the prefix is {} bytes, nft takes at most {MAX_LOG_PREFIX}", s.len()), help);
    }
    if s.chars().any(|c| c.is_control() || c == '"' || c == '\\') {
        return err("the prefix holds a control character, a quote or a backslash", help);
    }
    Ok(s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidths() {
        assert_eq!(parse_bandwidth("100mbit").unwrap(), Bandwidth(12_500_000));
        assert_eq!(parse_bandwidth("1.5gbit").unwrap(), Bandwidth(187_500_000));
        assert_eq!(parse_bandwidth("500kbit").unwrap(), Bandwidth(62_500));
        assert_eq!(parse_bandwidth("10MB/s").unwrap(), Bandwidth(10_000_000));
        assert_eq!(parse_bandwidth("1MiB/s").unwrap(), Bandwidth(1_048_576));
        let e = parse_bandwidth("10mbps").unwrap_err();
        assert!(e.message.contains("ambiguous"), "{e:?}");
        assert_eq!(e.help, "write 10mbit for bits per second or 10MB/s for bytes per second");
        assert!(parse_bandwidth("10").unwrap_err().message.contains("no unit"));
        assert!(parse_bandwidth("fast").is_err());
    }

    #[test]
    fn sizes_durations_rates() {
        assert_eq!(parse_size("64KiB").unwrap(), 65536);
        assert_eq!(parse_size("1MB").unwrap(), 1_000_000);
        assert_eq!(parse_duration_ms("30s").unwrap(), 30_000);
        assert_eq!(parse_duration_ms("5m").unwrap(), 300_000);
        assert!(parse_duration_ms("5 parsecs").is_err());
        let r = parse_event_rate("50/second").unwrap();
        assert_eq!((r.count, r.per, r.burst), (50, TimeUnit::Second, None));
        assert_eq!(parse_event_rate("10/minute burst 20").unwrap().burst, Some(20));
        assert!(parse_event_rate("fast").is_err());
    }

    #[test]
    fn ports_and_addresses() {
        assert_eq!(parse_port_list("443,80,81-90").unwrap(), vec![PortRange { lo: 80, hi: 90 }, PortRange::single(443)]);
        assert!(parse_port_list("0").is_err());
        assert!(parse_port_list("70000").is_err());
        assert!(parse_port_range("90-80").unwrap_err().help.contains("80-90"));
        assert!(matches!(parse_addr("10.0.0.0/8").unwrap(), AddrElem::Net(_)));
        assert!(parse_addr("10.0.0.1/8").unwrap_err().help.contains("10.0.0.0/8"));
        assert!(matches!(parse_addr("2001:db8::1-2001:db8::9").unwrap(), AddrElem::Range(..)));
        assert!(parse_addr("300.1.1.1").is_err());
    }
}
