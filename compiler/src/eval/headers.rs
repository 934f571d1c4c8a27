//! Packet-header values of the evaluator beyond addresses, ports and ICMP types: TCP flags, ICMP
//! codes and link-layer packet types — what a match's left side is, how the names on its right
//! read as numbers, how flag matches compare, and conntrack's state of a first TCP packet that
//! is not a plain SYN.

use std::net::IpAddr;

use serde_json::Value;

use crate::model::header::{PktType, TCP_FLAGS};
use crate::eval::flow::L4;

/// What the left side of a match reads, so a name on the right is read as the right number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    IcmpType { v6: bool },
    IcmpCode { v6: bool },
    /// `tcp flags`, also masked (`tcp flags & (fin|syn|rst|ack)`).
    TcpFlags,
    PktType,
    Other,
}

impl Field {
    /// The field a match's left expression reads.
    pub fn of(left: &Value) -> Field {
        if let Some(args) = left.get("&").and_then(Value::as_array) {
            return match args.first().map(Field::of) {
                Some(Field::TcpFlags) => Field::TcpFlags,
                _ => Field::Other,
            };
        }
        if left.pointer("/meta/key").and_then(Value::as_str) == Some("pkttype") {
            return Field::PktType;
        }
        match (left.pointer("/payload/protocol").and_then(Value::as_str), left.pointer("/payload/field").and_then(Value::as_str)) {
            (Some(p @ ("icmp" | "icmpv6")), Some("type")) => Field::IcmpType { v6: p == "icmpv6" },
            (Some(p @ ("icmp" | "icmpv6")), Some("code")) => Field::IcmpCode { v6: p == "icmpv6" },
            (Some("tcp"), Some("flags")) => Field::TcpFlags,
            _ => Field::Other,
        }
    }

    /// A name on the right of a match on this field, as a number.
    pub fn name_value(self, s: &str) -> Option<u64> {
        match self {
            Field::IcmpType { v6 } => crate::read::units::icmp_type_code(v6, s).map(u64::from),
            Field::IcmpCode { v6 } => crate::features::headers::icmp_code_number(v6, s).map(u64::from),
            Field::TcpFlags => flag_bit(s),
            Field::PktType => PktType::ALL.iter().find(|t| t.as_str() == s).map(|t| t.number()),
            Field::Other => None,
        }
    }
}

fn flag_bit(name: &str) -> Option<u64> {
    TCP_FLAGS.iter().find(|(n, _)| *n == name).map(|(_, b)| u64::from(*b))
}

/// A flag list as nft writes it (`"syn"`, `["fin", "syn"]`, a number): its bits.
pub fn flag_bits(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => flag_bit(s).or_else(|| s.strip_prefix("0x").and_then(|h| u64::from_str_radix(h, 16).ok())),
        Value::Array(items) => items.iter().try_fold(0, |acc, i| flag_bits(i).map(|b| acc | b)),
        _ => None,
    }
}

/// A match on (masked) TCP flags `value` against the flag list `bits`: `==`/`!=` compare,
/// `in` (nft's `tcp flags syn`) asks for any of them, `!` for none of them.
pub fn flags_match(op: &str, value: u64, bits: u64) -> Option<bool> {
    Some(match op {
        "==" => value == bits,
        "!=" => value != bits,
        "in" => value & bits != 0,
        "!" => value & bits == 0,
        _ => return None,
    })
}

/// `meta pkttype` of a packet to `daddr`: broadcast for 255.255.255.255, multicast for
/// 224.0.0.0/4 and ff00::/8, else to this host's link address (the kernel evaluator sends
/// frames to matching link addresses).
pub fn pkttype_of(daddr: IpAddr) -> PktType {
    match daddr {
        IpAddr::V4(a) if a.is_broadcast() => PktType::Broadcast,
        a if a.is_multicast() => PktType::Multicast,
        _ => PktType::Host,
    }
}

/// Conntrack's state of the first TCP packet of a flow with `flags`: `new` for SYN (with URG)
/// and for ACK (with URG) — a connection picked up mid-stream — else `invalid` (PSH, ECE and CWR
/// are ignored; `tcp_valid_flags` and `tcp_conntracks` in nf_conntrack_proto_tcp.c, with
/// `nf_conntrack_tcp_loose` on, the default).
pub fn first_tcp_state(flags: u8) -> &'static str {
    const URG: u8 = 0x20;
    match flags & !(0x08 | 0x40 | 0x80) & !URG {
        0x02 | 0x10 => "new",
        _ => "invalid",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_names_and_flag_matches() {
        let masked = json!({"&": [{"payload": {"protocol": "tcp", "field": "flags"}}, ["fin", "syn", "rst", "ack"]]});
        assert_eq!(Field::of(&masked), Field::TcpFlags);
        assert_eq!(flag_bits(&json!(["fin", "syn", "rst", "ack"])), Some(0x17));
        assert_eq!(Field::of(&json!({"payload": {"protocol": "icmpv6", "field": "code"}})), Field::IcmpCode { v6: true });
        assert_eq!(Field::IcmpCode { v6: false }.name_value("frag-needed"), Some(4));
        assert_eq!(Field::PktType.name_value("broadcast"), Some(1));
        assert_eq!(flags_match("==", 0x02 & 0x17, 0x02), Some(true));
        assert_eq!(flags_match("!", 0x12, 0xff), Some(false));
        assert_eq!(first_tcp_state(0x02), "new");
        assert_eq!(first_tcp_state(0x18), "new");
        assert_eq!(first_tcp_state(0x12), "invalid");
        assert_eq!(first_tcp_state(0), "invalid");
        assert_eq!(first_tcp_state(0x29), "invalid");
        assert_eq!(pkttype_of("255.255.255.255".parse().unwrap()), PktType::Broadcast);
        assert_eq!(pkttype_of("ff02::1".parse().unwrap()), PktType::Multicast);
    }
}

/// `meta l4proto` of a flow's packet: its protocol, except AH over IPv6, an extension header
/// the kernel skips (`ipv6_find_hdr`) to the header after it — in a flow's packet, none (59).
pub fn l4proto(proto: L4, v6: bool) -> u64 {
    match proto {
        L4::Other(crate::model::header::IPPROTO_AH) if v6 => 59,
        p => p.number(),
    }
}
