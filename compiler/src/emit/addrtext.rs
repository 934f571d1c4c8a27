//! Addresses as text, fast: a million-element set writes each address twice (nftables.json and
//! the manifest's digest), and `Ipv4Addr`'s `Display` (a formatter per octet) was the largest
//! cost of compiling it. Byte for byte what `Display` prints.

use std::net::{IpAddr, Ipv4Addr};

/// Dotted quad of an IPv4 address, at most 15 bytes.
pub struct V4Text {
    buf: [u8; 15],
    len: u8,
}

/// The decimal digits of every octet value (left-aligned) and how many there are.
const OCTETS: [([u8; 3], u8); 256] = {
    let mut t = [([0u8; 3], 0u8); 256];
    let mut i = 0;
    while i < 256 {
        let o = i as u8;
        t[i] = if o >= 100 {
            ([b'0' + o / 100, b'0' + o / 10 % 10, b'0' + o % 10], 3)
        } else if o >= 10 {
            ([b'0' + o / 10, b'0' + o % 10, 0], 2)
        } else {
            ([b'0' + o, 0, 0], 1)
        };
        i += 1;
    }
    t
};

impl V4Text {
    pub fn new(a: Ipv4Addr) -> V4Text {
        let mut buf = [0u8; 15];
        let mut n = 0;
        for (i, o) in a.octets().into_iter().enumerate() {
            if i > 0 {
                buf[n] = b'.';
                n += 1;
            }
            // Three bytes copied whatever the length: at most 12 + 3 = 15, inside the buffer.
            let (digits, len) = OCTETS[o as usize];
            buf[n..n + 3].copy_from_slice(&digits);
            n += len as usize;
        }
        V4Text { buf, len: n as u8 }
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len as usize]).expect("digits and dots")
    }
}

/// Append `a` as `Display` prints it.
pub fn push_addr(out: &mut Vec<u8>, a: IpAddr) {
    match a {
        IpAddr::V4(a) => out.extend_from_slice(V4Text::new(a).as_str().as_bytes()),
        IpAddr::V6(a) => {
            use std::io::Write;
            write!(out, "{a}").expect("writing to a Vec does not fail");
        }
    }
}

/// An address serialized as `Display` text (what serde does for `IpAddr` in JSON).
pub struct AddrStr(pub IpAddr);

impl serde::Serialize for AddrStr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            IpAddr::V4(a) => s.serialize_str(V4Text::new(a).as_str()),
            a => s.collect_str(&a),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_text_as_display() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut cases: Vec<u32> = vec![0, 1, 9, 10, 99, 100, 255, 256, 0x0a00_0001, 0xffff_ffff, 0x6464_6464, 0x0909_0909];
        for _ in 0..5000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            cases.push(x as u32);
        }
        for c in cases {
            let a = Ipv4Addr::from(c);
            assert_eq!(V4Text::new(a).as_str(), a.to_string());
            let mut v = Vec::new();
            push_addr(&mut v, IpAddr::V4(a));
            assert_eq!(v, a.to_string().as_bytes());
            assert_eq!(serde_json::to_string(&AddrStr(IpAddr::V4(a))).unwrap(), serde_json::to_string(&IpAddr::V4(a)).unwrap());
        }
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(serde_json::to_string(&AddrStr(v6)).unwrap(), "\"2001:db8::1\"");
    }
}
