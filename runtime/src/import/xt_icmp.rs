//! iptables' ICMP matches that iptables-nft keeps as opaque `xt match icmp`/`icmp6` (a numeric
//! type nftables has no name for, a type with a code: every stock ufw's `before6.rules`), read
//! back from the original iptables line as the native nftables match they are
//! (`icmpv6 type 141`, `icmp type 3 icmp code 4`). Pure: text in, text out.

/// iptables' ICMP names (`iptables -p icmp -h`): type and, for the names of one code, the code.
const ICMP: &[(&str, u8, Option<u8>)] = &[
    ("echo-reply", 0, None),
    ("pong", 0, None),
    ("destination-unreachable", 3, None),
    ("network-unreachable", 3, Some(0)),
    ("host-unreachable", 3, Some(1)),
    ("protocol-unreachable", 3, Some(2)),
    ("port-unreachable", 3, Some(3)),
    ("fragmentation-needed", 3, Some(4)),
    ("source-route-failed", 3, Some(5)),
    ("network-unknown", 3, Some(6)),
    ("host-unknown", 3, Some(7)),
    ("network-prohibited", 3, Some(9)),
    ("host-prohibited", 3, Some(10)),
    ("TOS-network-unreachable", 3, Some(11)),
    ("TOS-host-unreachable", 3, Some(12)),
    ("communication-prohibited", 3, Some(13)),
    ("host-precedence-violation", 3, Some(14)),
    ("precedence-cutoff", 3, Some(15)),
    ("source-quench", 4, None),
    ("redirect", 5, None),
    ("network-redirect", 5, Some(0)),
    ("host-redirect", 5, Some(1)),
    ("TOS-network-redirect", 5, Some(2)),
    ("TOS-host-redirect", 5, Some(3)),
    ("echo-request", 8, None),
    ("ping", 8, None),
    ("router-advertisement", 9, None),
    ("router-solicitation", 10, None),
    ("time-exceeded", 11, None),
    ("ttl-exceeded", 11, None),
    ("ttl-zero-during-transit", 11, Some(0)),
    ("ttl-zero-during-reassembly", 11, Some(1)),
    ("parameter-problem", 12, None),
    ("ip-header-bad", 12, Some(0)),
    ("required-option-missing", 12, Some(1)),
    ("timestamp-request", 13, None),
    ("timestamp-reply", 14, None),
    ("address-mask-request", 17, None),
    ("address-mask-reply", 18, None),
];

/// ip6tables' ICMPv6 names (`ip6tables -p icmpv6 -h`).
const ICMPV6: &[(&str, u8, Option<u8>)] = &[
    ("destination-unreachable", 1, None),
    ("no-route", 1, Some(0)),
    ("communication-prohibited", 1, Some(1)),
    ("beyond-scope", 1, Some(2)),
    ("address-unreachable", 1, Some(3)),
    ("port-unreachable", 1, Some(4)),
    ("failed-policy", 1, Some(5)),
    ("reject-route", 1, Some(6)),
    ("packet-too-big", 2, None),
    ("time-exceeded", 3, None),
    ("ttl-exceeded", 3, None),
    ("ttl-zero-during-transit", 3, Some(0)),
    ("ttl-zero-during-reassembly", 3, Some(1)),
    ("parameter-problem", 4, None),
    ("bad-header", 4, Some(0)),
    ("unknown-header-type", 4, Some(1)),
    ("unknown-option", 4, Some(2)),
    ("echo-request", 128, None),
    ("ping", 128, None),
    ("echo-reply", 129, None),
    ("pong", 129, None),
    ("mld-listener-query", 130, None),
    ("mld-listener-report", 131, None),
    ("mld-listener-done", 132, None),
    ("mld-listener-reduction", 132, None),
    ("router-solicitation", 133, None),
    ("router-advertisement", 134, None),
    ("neighbour-solicitation", 135, None),
    ("neighbor-solicitation", 135, None),
    ("neighbour-advertisement", 136, None),
    ("neighbor-advertisement", 136, None),
    ("redirect", 137, None),
];

/// The nftables match for the ICMP match of an iptables-save rule line (`-p icmpv6
/// --icmpv6-type 141 …`, `-p icmp -m icmp --icmp-type 3/4 …`): `icmpv6 type 141`,
/// `icmp type 3 icmp code 4`, `icmp type != 8`; an empty string for `any`. `None` when the line
/// holds no ICMP match, a name iptables does not know, or a negated type with a code (two
/// nftables matches cannot say "not both").
pub fn native(line: &str) -> Option<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| matches!(*w, "--icmp-type" | "--icmpv6-type"))?;
    let v6 = words[at] == "--icmpv6-type";
    let negated = at > 0 && words[at - 1] == "!";
    let value = *words.get(at + 1)?;
    if value == "any" {
        return (!negated).then(String::new);
    }
    let (ty, code) = match value.split_once('/') {
        Some((t, c)) => (t.parse::<u8>().ok()?, Some(c.parse::<u8>().ok()?)),
        None => match value.parse::<u8>() {
            Ok(t) => (t, None),
            Err(_) => {
                let names = if v6 { ICMPV6 } else { ICMP };
                let (_, t, c) = names.iter().find(|(n, _, _)| n.eq_ignore_ascii_case(value))?;
                (*t, *c)
            }
        },
    };
    let proto = if v6 { "icmpv6" } else { "icmp" };
    match (negated, code) {
        (false, None) => Some(format!("{proto} type {ty}")),
        (false, Some(c)) => Some(format!("{proto} type {ty} {proto} code {c}")),
        (true, None) => Some(format!("{proto} type != {ty}")),
        (true, Some(_)) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::native;

    #[test]
    fn iptables_icmp_matches_read_as_nftables() {
        for (line, want) in [
            // ufw's before6.rules: numeric types nftables has no name for.
            ("-A ufw6-before-input -p icmpv6 --icmpv6-type 141 -m hl --hl-eq 255 -j ACCEPT", Some("icmpv6 type 141")),
            ("-A ufw6-before-input -p icmpv6 --icmpv6-type 130 -s fe80::/10 -j ACCEPT", Some("icmpv6 type 130")),
            ("-A INPUT -p icmp -m icmp --icmp-type 3/4 -j ACCEPT", Some("icmp type 3 icmp code 4")),
            ("-A INPUT -p icmp -m icmp --icmp-type fragmentation-needed -j ACCEPT", Some("icmp type 3 icmp code 4")),
            ("-A INPUT -p ipv6-icmp -m icmp6 --icmpv6-type port-unreachable -j ACCEPT", Some("icmpv6 type 1 icmpv6 code 4")),
            ("-A INPUT -p icmp -m icmp ! --icmp-type 8 -j DROP", Some("icmp type != 8")),
            ("-A INPUT -p icmp -m icmp --icmp-type any -j ACCEPT", Some("")),
            ("-A INPUT -p icmp -m icmp ! --icmp-type 3/4 -j DROP", None),
            ("-A INPUT -p icmp -m icmp --icmp-type no-such-name -j DROP", None),
            ("-A INPUT -p tcp --dport 22 -j ACCEPT", None),
        ] {
            assert_eq!(native(line).as_deref(), want, "{line}");
        }
    }
}
