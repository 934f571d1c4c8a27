//! Ethernet frames the kernel evaluator sends: a flow's first packet (TCP SYN, UDP datagram,
//! ICMP/ICMPv6 echo or neighbour discovery, other IP protocols) with its checksums, and the
//! link-layer destination that makes the kernel's `meta pkttype` what the pure evaluator says.

use std::net::IpAddr;

use fwc_compiler::eval::{Flow, L4};


pub(super) fn csum(data: &[u8], mut sum: u32) -> u16 {
    for chunk in data.chunks(2) {
        let word = if chunk.len() == 2 { u16::from_be_bytes([chunk[0], chunk[1]]) } else { u16::from_be_bytes([chunk[0], 0]) };
        sum += u32::from(word);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An Ethernet frame carrying the flow's first packet (TCP SYN or a small UDP datagram).
pub(super) fn frame(f: &Flow, src_mac: [u8; 6], dst_mac: [u8; 6]) -> Vec<u8> {
    let mut l4 = Vec::new();
    if matches!(f.proto, L4::Icmp | L4::Icmpv6) {
        // Echo request or reply: type, code, checksum, identifier (the flow's source port), sequence.
        l4.extend([f.dport as u8, f.icmp_code, 0, 0]);
        l4.extend(f.sport.to_be_bytes());
        l4.extend(1u16.to_be_bytes());
        l4.extend(b"fwc!");
    } else {
        l4.extend(f.sport.to_be_bytes());
        l4.extend(f.dport.to_be_bytes());
    }
    let proto = match f.proto {
        L4::Other(n) => {
            // A few bytes of payload (for GRE: version 0, no options, an experimental
            // ethertype; for AH a header of 12 bytes, no next header); no checksum is computed.
            l4.clear();
            if n == 51 {
                l4.extend([59, 1, 0, 0]);
                l4.extend(b"fwc!");
                l4.extend(1u32.to_be_bytes());
            } else {
                l4.extend([0, 0, 0x88, 0xb5]);
                l4.extend(b"fwc!");
            }
            n
        }
        L4::Icmp => 1u8,
        L4::Icmpv6 => 58u8,
        L4::Tcp => {
            l4.extend(1u32.to_be_bytes()); // seq
            l4.extend(0u32.to_be_bytes()); // ack
            l4.extend([5 << 4, f.tcp_flags]); // data offset, flags (SYN unless the flow says)
            l4.extend(65535u16.to_be_bytes());
            l4.extend([0, 0, 0, 0]); // checksum, urgent
            6u8
        }
        _ => {
            l4.extend(12u16.to_be_bytes());
            l4.extend([0, 0]);
            l4.extend(b"fwc!");
            17u8
        }
    };
    let mut pseudo = Vec::new();
    let (src, dst) = (ip_bytes(f.saddr), ip_bytes(f.daddr));
    pseudo.extend(&src);
    pseudo.extend(&dst);
    if f.saddr.is_ipv4() {
        pseudo.extend([0, proto]);
        pseudo.extend((l4.len() as u16).to_be_bytes());
    } else {
        pseudo.extend((l4.len() as u32).to_be_bytes());
        pseudo.extend([0, 0, 0, proto]);
    }
    // ICMP (v4) has no pseudo header; TCP, UDP and ICMPv6 do.
    let pre: u32 = if proto == 1 { 0 } else { pseudo.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum() };
    let c = csum(&l4, pre);
    let at = match f.proto {
        L4::Tcp => Some(16),
        L4::Udp => Some(6),
        L4::Icmp | L4::Icmpv6 => Some(2),
        L4::Other(_) => None,
    };
    if let Some(at) = at {
        l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
    // The packet's name in the trace (its source port, ICMP identifier, or for another
    // protocol the IPv4 identification / IPv6 flow label).
    let id = if by_flow_label(f) { f.sport } else { 1 };
    let mut out = Vec::new();
    out.extend(dst_mac);
    out.extend(src_mac);
    if f.saddr.is_ipv4() {
        out.extend([0x08, 0x00]);
        let mut ip = vec![0x45, 0];
        ip.extend(((20 + l4.len()) as u16).to_be_bytes());
        ip.extend(id.to_be_bytes());
        ip.extend([0x40, 0, 64, proto, 0, 0]);
        ip.extend(&src);
        ip.extend(&dst);
        let c = csum(&ip, 0);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        out.extend(ip);
    } else {
        out.extend([0x86, 0xdd]);
        out.extend([0x60, 0]);
        out.extend(if id == 1 { 0u16 } else { id }.to_be_bytes());
        out.extend((l4.len() as u16).to_be_bytes());
        out.extend([proto, 64]);
        out.extend(&src);
        out.extend(&dst);
    }
    out.extend(l4);
    out
}

/// The link-layer destination of a packet to `daddr`: the broadcast address for
/// 255.255.255.255, the group's address for a multicast one (`01:00:5e` + 23 bits, `33:33` +
/// 32 bits), else the receiving interface's `mac` — so the kernel's `meta pkttype` is what the
/// pure evaluator takes from the destination.
pub(super) fn link_dst(daddr: IpAddr, mac: [u8; 6]) -> [u8; 6] {
    match daddr {
        IpAddr::V4(a) if a.is_broadcast() => [0xff; 6],
        IpAddr::V4(a) if a.is_multicast() => {
            let o = a.octets();
            [0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]]
        }
        IpAddr::V6(a) if a.is_multicast() => {
            let o = a.octets();
            [0x33, 0x33, o[12], o[13], o[14], o[15]]
        }
        _ => mac,
    }
}

pub(super) fn ip_bytes(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// Neighbour discovery (router/neighbour solicitation and advertisement): named by its flow label.
pub(super) fn by_flow_label(f: &Flow) -> bool {
    matches!(f.proto, L4::Other(_)) || (f.proto == L4::Icmpv6 && matches!(f.dport, 133..=136))
}
