//! PROXY protocol headers (v1 text, v2 binary) that the forwarder writes to the target right
//! after connecting, so the backend learns the real client address. Spec:
//! <https://www.haproxy.org/download/2.9/doc/proxy-protocol.txt>.

use std::net::{IpAddr, SocketAddr};

/// The v2 signature (12 bytes).
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// Transport of the proxied connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Stream,
    Datagram,
}

/// IPv4-mapped IPv6 addresses (from a dual-stack listener) become plain IPv4.
fn canonical(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), a.port()),
            None => a,
        },
        IpAddr::V4(_) => a,
    }
}

/// The header for `version` 1 or 2: `src` is the client, `dst` the address it connected to.
pub fn header(version: u8, transport: Transport, src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let (src, dst) = (canonical(src), canonical(dst));
    if version == 1 {
        return v1(src, dst);
    }
    v2(transport, src, dst)
}

fn v1(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let fam = match (src.ip(), dst.ip()) {
        (IpAddr::V4(_), IpAddr::V4(_)) => "TCP4",
        (IpAddr::V6(_), IpAddr::V6(_)) => "TCP6",
        _ => return b"PROXY UNKNOWN\r\n".to_vec(),
    };
    format!("PROXY {fam} {} {} {} {}\r\n", src.ip(), dst.ip(), src.port(), dst.port()).into_bytes()
}

fn v2(transport: Transport, src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let mut h = Vec::with_capacity(16 + 36);
    h.extend_from_slice(&V2_SIGNATURE);
    h.push(0x21); // version 2, command PROXY
    let t = match transport {
        Transport::Stream => 0x1,
        Transport::Datagram => 0x2,
    };
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            h.push(0x10 | t);
            h.extend_from_slice(&12u16.to_be_bytes());
            h.extend_from_slice(&s.octets());
            h.extend_from_slice(&d.octets());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            h.push(0x20 | t);
            h.extend_from_slice(&36u16.to_be_bytes());
            h.extend_from_slice(&s.octets());
            h.extend_from_slice(&d.octets());
        }
        _ => {
            // Mixed families cannot be expressed: UNSPEC with no address block.
            h[12] = 0x20; // LOCAL
            h.push(0x00);
            h.extend_from_slice(&0u16.to_be_bytes());
            return h;
        }
    }
    h.extend_from_slice(&src.port().to_be_bytes());
    h.extend_from_slice(&dst.port().to_be_bytes());
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_and_v2() {
        let s: SocketAddr = "[::ffff:192.0.2.1]:5000".parse().unwrap();
        let d: SocketAddr = "198.51.100.2:80".parse().unwrap();
        assert_eq!(header(1, Transport::Stream, s, d), b"PROXY TCP4 192.0.2.1 198.51.100.2 5000 80\r\n");
        let h = header(2, Transport::Stream, s, d);
        assert_eq!(&h[..12], &V2_SIGNATURE);
        assert_eq!(&h[12..16], &[0x21, 0x11, 0, 12]);
        assert_eq!(&h[16..20], &[192, 0, 2, 1]);
        assert_eq!(&h[24..28], &[0x13, 0x88, 0, 80]);
        let s6: SocketAddr = "[2001:db8::1]:1".parse().unwrap();
        let d6: SocketAddr = "[2001:db8::2]:2".parse().unwrap();
        assert_eq!(header(1, Transport::Stream, s6, d6), b"PROXY TCP6 2001:db8::1 2001:db8::2 1 2\r\n");
        assert_eq!(header(2, Transport::Stream, s6, d6).len(), 16 + 36);
    }
}
