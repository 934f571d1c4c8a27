//! Parsing of filter rules' packet-header match values: ICMP codes as nft spells them
//! (`frag-needed`), TCP flags (`syn`, `syn,ack/all`, `!syn`), packet types (`broadcast`),
//! interface lists (`eth0,eth1`) and the `!` that negates a list. Errors carry a message and a
//! hint; the caller attaches the span.

use crate::model::header::{ip_protocol_number, PktType, TcpFlags, DEFAULT_TCP_MASK, IP_PROTOCOLS, TCP_FLAGS};
use crate::model::Proto;
use crate::read::units::UnitError;

fn err<T>(message: impl Into<String>, help: impl Into<String>) -> Result<T, UnitError> {
    Err(UnitError { message: message.into(), help: help.into() })
}

/// `proto=` of a filter rule: `tcp`, `udp`, `both`, `icmp`, `icmpv6`, another IP protocol by
/// name (`gre`, `esp`, … [`IP_PROTOCOLS`]) or any by number 0-255 (6, 17, 1 and 58 are tcp,
/// udp, icmp and icmpv6, with their ports and types).
pub fn parse_proto(s: &str) -> Result<Proto, UnitError> {
    let named = [("tcp", Proto::Tcp), ("udp", Proto::Udp), ("both", Proto::Both), ("icmp", Proto::Icmp), ("icmpv6", Proto::Icmpv6)];
    let s = s.trim();
    if let Some((_, p)) = named.iter().find(|(n, _)| *n == s) {
        return Ok(*p);
    }
    let number = s.parse::<u8>().ok().or_else(|| ip_protocol_number(s));
    match number {
        Some(6) => Ok(Proto::Tcp),
        Some(17) => Ok(Proto::Udp),
        Some(1) => Ok(Proto::Icmp),
        Some(58) => Ok(Proto::Icmpv6),
        Some(n) => Ok(Proto::Other(n)),
        None => {
            let names: Vec<&str> = named.iter().map(|(n, _)| *n).chain(IP_PROTOCOLS.iter().map(|(n, _)| *n)).collect();
            let list = format!("proto is one of {}, or an IP protocol number 0-255", names.join(", "));
            let help = match crate::suggest::did_you_mean(s, names.iter().copied()) {
                Some(m) => format!("did you mean \"{m}\"? {list}"),
                None => list,
            };
            err(format!("\"{s}\" is not a protocol fwc knows"), help)
        }
    }
}

/// `"!…"` -> `(true, "…")`: a leading `!` negates a list (none of it).
pub fn strip_not(s: &str) -> (bool, &str) {
    match s.trim_start().strip_prefix('!') {
        Some(rest) => (true, rest.trim_start()),
        None => (false, s),
    }
}

/// ICMP code names as nft spells them (`nft describe icmp code`).
pub const ICMP_CODES: &[(&str, u8)] = &[
    ("net-unreachable", 0),
    ("host-unreachable", 1),
    ("prot-unreachable", 2),
    ("port-unreachable", 3),
    ("frag-needed", 4),
    ("net-prohibited", 9),
    ("host-prohibited", 10),
    ("admin-prohibited", 13),
];

/// ICMPv6 code names as nft spells them (`nft describe icmpv6 code`).
pub const ICMPV6_CODES: &[(&str, u8)] =
    &[("no-route", 0), ("admin-prohibited", 1), ("addr-unreachable", 3), ("port-unreachable", 4), ("policy-fail", 5), ("reject-route", 6)];

fn code_table(v6: bool) -> &'static [(&'static str, u8)] {
    if v6 {
        ICMPV6_CODES
    } else {
        ICMP_CODES
    }
}

/// The name nft gives ICMP (`v6`: ICMPv6) code `code`, if it has one.
pub fn icmp_code_name(v6: bool, code: u8) -> Option<&'static str> {
    code_table(v6).iter().find(|(_, c)| *c == code).map(|(n, _)| *n)
}

/// The name to write for `code` of ICMP type `icmp_type`: nft's code names are those of
/// destination unreachable (ICMP 3, ICMPv6 1); another type's code is written as a number
/// (code 0 of an echo request is not "net-unreachable").
pub fn icmp_code_name_of(v6: bool, icmp_type: Option<u8>, code: u8) -> Option<&'static str> {
    let unreachable = if v6 { 1 } else { 3 };
    icmp_type.filter(|t| *t == unreachable).and_then(|_| icmp_code_name(v6, code))
}

/// The number of the ICMP (`v6`: ICMPv6) code nft calls `name`.
pub fn icmp_code_number(v6: bool, name: &str) -> Option<u8> {
    code_table(v6).iter().find(|(n, _)| *n == name).map(|(_, c)| *c)
}

/// `"frag-needed"`, `"0,13"`: ICMP codes of the family `v6` says, sorted, without duplicates.
pub fn parse_icmp_codes(s: &str, v6: bool) -> Result<Vec<u8>, UnitError> {
    let proto = if v6 { "icmpv6" } else { "icmp" };
    let names = || code_table(v6).iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ");
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim) {
        match part.parse::<u8>().ok().or_else(|| icmp_code_number(v6, part)) {
            Some(c) => out.push(c),
            None if part.is_empty() => return err("an empty ICMP code", format!("write icmp-code=\"{}\" or a comma list of codes", code_table(v6)[0].0)),
            None => {
                let help = match crate::suggest::did_you_mean(part, code_table(v6).iter().map(|(n, _)| *n)) {
                    Some(m) => format!("did you mean \"{m}\"? {proto} codes are nft's names ({}) or numbers 0-255", names()),
                    None => format!("{proto} codes are nft's names ({}) or numbers 0-255", names()),
                };
                return err(format!("\"{part}\" is not an {proto} code"), help);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

fn tcp_flag_bits(list: &str, what: &str) -> Result<u8, UnitError> {
    let list = list.trim();
    match list {
        "none" if what == "set" => return Ok(0),
        "all" if what == "mask" => return Ok(0xff),
        _ => {}
    }
    let mut bits = 0;
    for part in list.split(',').map(str::trim) {
        let Some((_, b)) = TCP_FLAGS.iter().find(|(n, _)| *n == part) else {
            let names = TCP_FLAGS.iter().map(|(n, _)| *n);
            let help = match crate::suggest::did_you_mean(part, names) {
                Some(m) => format!("did you mean \"{m}\"? flags are fin, syn, rst, psh, ack, urg, ecn, cwr (`none` for no flag set, `all` as the mask)"),
                None => "flags are fin, syn, rst, psh, ack, urg, ecn, cwr (`none` for no flag set, `all` as the mask); e.g. tcp-flags=\"syn\", \"syn,ack/all\", \"!syn\"".into(),
            };
            return err(format!("\"{part}\" is not a TCP flag"), help);
        };
        bits |= b;
    }
    Ok(bits)
}

/// `tcp-flags="SET[/MASK]"`, optionally `!`: the flags of MASK (default `fin,syn,rst,ack`) are
/// exactly SET. `"syn"` is iptables' `--syn`; `"none/all"` a packet without flags.
pub fn parse_tcp_flags(s: &str) -> Result<TcpFlags, UnitError> {
    let (negated, rest) = strip_not(s);
    let (set_s, mask_s) = match rest.split_once('/') {
        Some((a, b)) => (a, Some(b)),
        None => (rest, None),
    };
    let set = tcp_flag_bits(set_s, "set")?;
    let mask = match mask_s {
        Some(m) => tcp_flag_bits(m, "mask")?,
        None => DEFAULT_TCP_MASK | set,
    };
    if set & !mask != 0 {
        let outside = crate::model::header::tcp_flag_names(set & !mask).join(",");
        return err(
            format!("flags {outside} are set but not in the mask, so the rule could never match"),
            "write SET/MASK with every flag of SET also in MASK, e.g. tcp-flags=\"syn,ack/syn,ack,rst\"",
        );
    }
    Ok(TcpFlags { set, mask, negated })
}

/// `pkttype="broadcast,multicast"`.
pub fn parse_pkttypes(s: &str) -> Result<Vec<PktType>, UnitError> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim) {
        match PktType::ALL.iter().find(|t| t.as_str() == part) {
            Some(t) => out.push(*t),
            None => {
                let help = match crate::suggest::did_you_mean(part, PktType::ALL.iter().map(|t| t.as_str())) {
                    Some(m) => format!("did you mean \"{m}\"? packet types are host, broadcast, multicast, other"),
                    None => "packet types are host (to this host's link address), broadcast, multicast, other".into(),
                };
                return err(format!("\"{part}\" is not a packet type"), help);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// `eth0` or `eth0,eth1` (each name checked by `one`), without duplicates, in the order written.
pub fn parse_ifnames(s: &str, one: impl Fn(&str) -> Result<String, UnitError>) -> Result<Vec<String>, UnitError> {
    let mut out: Vec<String> = Vec::new();
    for part in s.split(',').map(str::trim) {
        let name = one(part)?;
        if !out.contains(&name) {
            out.push(name);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_flags_read_as_iptables_and_nft_mean_them() {
        let syn = parse_tcp_flags("syn").unwrap();
        assert_eq!((syn.set, syn.mask, syn.negated), (0x02, 0x17, false));
        assert!(syn.matches(0x02) && syn.matches(0x02 | 0x08) && !syn.matches(0x12) && !syn.matches(0x10));
        let not_syn = parse_tcp_flags("!syn").unwrap();
        assert!(not_syn.matches(0x10) && !not_syn.matches(0x02));
        let null = parse_tcp_flags("none/all").unwrap();
        assert_eq!((null.set, null.mask), (0, 0xff));
        assert!(null.matches(0) && !null.matches(0x01));
        let xmas = parse_tcp_flags("fin,psh,urg/all").unwrap();
        assert!(xmas.matches(0x29) && !xmas.matches(0x2b));
        assert_eq!(parse_tcp_flags("syn,fin/syn,fin").unwrap().to_string(), "fin,syn/fin,syn");
        assert_eq!(not_syn.to_string(), "!syn");
        assert!(parse_tcp_flags("syn/ack").unwrap_err().message.contains("not in the mask"));
        assert!(parse_tcp_flags("synn").unwrap_err().help.contains("did you mean \"syn\""));
        assert!(parse_tcp_flags("all").is_err() && parse_tcp_flags("syn/none").is_err());
    }

    #[test]
    fn icmp_codes_take_nft_names_and_numbers() {
        assert_eq!(parse_icmp_codes("frag-needed,0, 13", false).unwrap(), vec![0, 4, 13]);
        assert_eq!(parse_icmp_codes("port-unreachable", true).unwrap(), vec![4]);
        assert!(parse_icmp_codes("frag-neded", false).unwrap_err().help.contains("frag-needed"));
        assert!(parse_icmp_codes("no-route", false).is_err());
        assert!(parse_icmp_codes("256", false).is_err());
        assert_eq!(icmp_code_name(false, 4), Some("frag-needed"));
    }

    #[test]
    fn protocols_by_name_or_number() {
        assert_eq!(parse_proto("gre").unwrap(), Proto::Other(47));
        assert_eq!(parse_proto("47").unwrap(), Proto::Other(47));
        assert_eq!(parse_proto("6").unwrap(), Proto::Tcp);
        assert_eq!(parse_proto("ipv6").unwrap(), Proto::Other(41));
        assert_eq!(parse_proto("0").unwrap(), Proto::Other(0));
        assert_eq!(Proto::Other(50).as_str(), "esp");
        assert_eq!(Proto::Other(253).as_str(), "253");
        assert!(parse_proto("256").is_err());
        assert!(parse_proto("gree").unwrap_err().help.contains("did you mean \"gre\""));
    }

    #[test]
    fn negation_lists_and_packet_types() {
        assert_eq!(strip_not("!10.0.0.0/8"), (true, "10.0.0.0/8"));
        assert_eq!(strip_not("22"), (false, "22"));
        assert_eq!(parse_pkttypes("multicast,broadcast").unwrap(), vec![PktType::Broadcast, PktType::Multicast]);
        assert!(parse_pkttypes("unicast").is_err());
        let names = parse_ifnames("eth0, eth1,eth0", |s| Ok(s.to_string())).unwrap();
        assert_eq!(names, ["eth0", "eth1"]);
    }
}
