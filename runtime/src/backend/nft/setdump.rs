//! The elements of a plain hash set of addresses (`type ipv4_addr` / `ipv6_addr`, no flags: the
//! hash sets of a big set and their shards) read straight from the kernel with one
//! `NFT_MSG_GETSETELEM` netlink dump: no nft process, no JSON. nft's JSON listing of a
//! million elements and fwc's parse of it cost seconds more than the kernel's own dump
//! (docs/performance.md, "Sharded hash sets"). [`parse_messages`] is pure; [`addresses`] does
//! the socket I/O, in the caller's network namespace.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use miette::{miette, Result};

const NETLINK_NETFILTER: libc::c_int = 12;
const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFT_MSG_GETSETELEM: u16 = 13;
const NFT_MSG_NEWSETELEM: u16 = 12;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const NLM_F_DUMP_INTR: u16 = 0x10;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NFPROTO_INET: u8 = 1;
const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
const NFTA_SET_ELEM_LIST_SET: u16 = 2;
const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_SET_ELEM_KEY: u16 = 1;
const NFTA_SET_ELEM_FLAGS: u16 = 3;
const NFTA_DATA_VALUE: u16 = 1;
const NFT_SET_ELEM_INTERVAL_END: u32 = 1;
/// Attribute type bits that are flags, not the type.
const NLA_TYPE_MASK: u16 = 0x3fff;

/// What one batch of netlink messages said.
#[derive(Debug, PartialEq, Eq)]
pub enum Batch {
    /// More messages follow.
    More,
    /// The dump ended (`NLMSG_DONE`).
    Done,
    /// The dump was interrupted by a concurrent change (`NLM_F_DUMP_INTR`): start again.
    Interrupted,
}

/// The request: dump the elements of `set` in `table inet <table>`.
pub fn request(table: &str, set: &str, seq: u32) -> Vec<u8> {
    let mut payload = vec![NFPROTO_INET, 0, 0, 0];
    attr(&mut payload, NFTA_SET_ELEM_LIST_TABLE, &[table.as_bytes(), b"\0"].concat());
    attr(&mut payload, NFTA_SET_ELEM_LIST_SET, &[set.as_bytes(), b"\0"].concat());
    let mut msg = Vec::with_capacity(16 + payload.len());
    msg.extend_from_slice(&(16 + payload.len() as u32).to_ne_bytes());
    msg.extend_from_slice(&((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETSETELEM).to_ne_bytes());
    msg.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    msg.extend_from_slice(&seq.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend_from_slice(&payload);
    msg
}

fn attr(out: &mut Vec<u8>, kind: u16, data: &[u8]) {
    let len = 4 + data.len();
    out.extend_from_slice(&(len as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(data);
    out.resize(out.len() + (4 - len % 4) % 4, 0);
}

/// The attributes in `buf`: (type without its flag bits, payload).
fn attrs(buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut off = 0;
    std::iter::from_fn(move || {
        let head = buf.get(off..off + 4)?;
        let len = usize::from(u16::from_ne_bytes([head[0], head[1]]));
        let kind = u16::from_ne_bytes([head[2], head[3]]) & NLA_TYPE_MASK;
        let data = buf.get(off + 4..off + len.max(4))?;
        off += (len.max(4) + 3) & !3;
        Some((kind, data))
    })
}

/// The keys of the elements in one received buffer of netlink messages, appended to `out`
/// (4 bytes for IPv4, 16 for IPv6, as the kernel holds them: network order); what the buffer
/// says about the dump, or the kernel's error.
pub fn parse_messages(buf: &[u8], out: &mut Vec<[u8; 16]>, key_len: usize) -> Result<Batch> {
    let mut off = 0;
    let mut state = Batch::More;
    while let Some(head) = buf.get(off..off + 16) {
        let len = u32::from_ne_bytes(head[0..4].try_into().expect("4 bytes")) as usize;
        let kind = u16::from_ne_bytes([head[4], head[5]]);
        let flags = u16::from_ne_bytes([head[6], head[7]]);
        if len < 16 || off + len > buf.len() {
            return Err(miette!("the kernel's set element dump has a truncated message"));
        }
        let msg = &buf[off..off + len];
        off += (len + 3) & !3;
        if flags & NLM_F_DUMP_INTR != 0 {
            state = Batch::Interrupted;
        }
        match kind {
            NLMSG_DONE => return Ok(if state == Batch::Interrupted { state } else { Batch::Done }),
            NLMSG_ERROR => {
                let code = msg.get(16..20).map(|b| i32::from_ne_bytes(b.try_into().expect("4 bytes"))).unwrap_or(0);
                if code != 0 {
                    return Err(miette!("the kernel refused the set element dump: {}", std::io::Error::from_raw_os_error(-code)));
                }
                return Ok(Batch::Done);
            }
            k if k == (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWSETELEM => {
                // nlmsghdr, nfgenmsg, then the attributes.
                for (t, list) in attrs(msg.get(20..).unwrap_or_default()) {
                    if t != NFTA_SET_ELEM_LIST_ELEMENTS {
                        continue;
                    }
                    for (t, elem) in attrs(list) {
                        if t != NFTA_LIST_ELEM {
                            continue;
                        }
                        let (mut key, mut end) = (None, false);
                        for (t, v) in attrs(elem) {
                            match t {
                                NFTA_SET_ELEM_KEY => key = attrs(v).find(|(t, _)| *t == NFTA_DATA_VALUE).map(|(_, d)| d),
                                NFTA_SET_ELEM_FLAGS => end = v.len() >= 4 && u32::from_be_bytes(v[..4].try_into().expect("4 bytes")) & NFT_SET_ELEM_INTERVAL_END != 0,
                                _ => {}
                            }
                        }
                        match key {
                            _ if end => {}
                            Some(k) if k.len() == key_len => {
                                let mut a = [0u8; 16];
                                a[..key_len].copy_from_slice(k);
                                out.push(a);
                            }
                            _ => return Err(miette!("the kernel's set element dump has an element that is not a {key_len}-byte address")),
                        }
                    }
                }
            }
            _ => {}
        }
    }
    Ok(state)
}

/// The addresses in set `set` of `table inet <table>` (a plain hash set of `ipv4_addr`, or of
/// `ipv6_addr` when `v6`), read over netlink in the calling thread's network namespace, in
/// the kernel's (hash) order.
pub fn addresses(table: &str, set: &str, v6: bool) -> Result<Vec<IpAddr>> {
    let key_len = if v6 { 16 } else { 4 };
    for _ in 0..5 {
        let mut keys = Vec::new();
        if dump(table, set, key_len, &mut keys)? == Batch::Done {
            return Ok(keys
                .into_iter()
                .map(|k| if v6 { IpAddr::V6(Ipv6Addr::from(k)) } else { IpAddr::V4(Ipv4Addr::new(k[0], k[1], k[2], k[3])) })
                .collect());
        }
    }
    Err(miette!("the set {set} kept changing while it was read (five dumps interrupted)"))
}

/// One dump over a fresh socket.
fn dump(table: &str, set: &str, key_len: usize, keys: &mut Vec<[u8; 16]>) -> Result<Batch> {
    // SAFETY: plain socket calls on a descriptor owned here and closed by `Fd`'s drop.
    let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, NETLINK_NETFILTER) };
    if fd < 0 {
        return Err(miette!("cannot open a netfilter netlink socket: {}", std::io::Error::last_os_error()));
    }
    struct Fd(libc::c_int);
    impl Drop for Fd {
        fn drop(&mut self) {
            // SAFETY: the descriptor is ours and closed once.
            unsafe { libc::close(self.0) };
        }
    }
    let fd = Fd(fd);
    let req = request(table, set, 1);
    // SAFETY: `req` is a valid buffer of its length; the kernel is the default destination.
    if unsafe { libc::send(fd.0, req.as_ptr().cast(), req.len(), 0) } < 0 {
        return Err(miette!("cannot send the set element dump request: {}", std::io::Error::last_os_error()));
    }
    let mut buf = vec![0u8; 1 << 16];
    loop {
        // SAFETY: `buf` is a valid, writable buffer of its length.
        let n = unsafe { libc::recv(fd.0, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(miette!("cannot read the set element dump: {e}"));
        }
        match parse_messages(&buf[..n as usize], keys, key_len)? {
            Batch::More => {}
            done => return Ok(done),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One NEWSETELEM message holding `keys` (and an interval end, which is skipped).
    fn message(keys: &[&[u8]], flags: u16) -> Vec<u8> {
        let mut list = Vec::new();
        for k in keys {
            let mut key = Vec::new();
            attr(&mut key, NFTA_DATA_VALUE, k);
            let mut elem = Vec::new();
            attr(&mut elem, NFTA_SET_ELEM_KEY | 0x8000, &key);
            attr(&mut list, NFTA_LIST_ELEM | 0x8000, &elem);
        }
        let mut end = Vec::new();
        let mut key = Vec::new();
        attr(&mut key, NFTA_DATA_VALUE, &[9, 9, 9, 9]);
        attr(&mut end, NFTA_SET_ELEM_KEY | 0x8000, &key);
        attr(&mut end, NFTA_SET_ELEM_FLAGS, &NFT_SET_ELEM_INTERVAL_END.to_be_bytes());
        attr(&mut list, NFTA_LIST_ELEM | 0x8000, &end);
        let mut payload = vec![NFPROTO_INET, 0, 0, 0];
        attr(&mut payload, NFTA_SET_ELEM_LIST_TABLE, b"fwc\0");
        attr(&mut payload, NFTA_SET_ELEM_LIST_ELEMENTS | 0x8000, &list);
        let mut m = Vec::new();
        m.extend_from_slice(&(16 + payload.len() as u32).to_ne_bytes());
        m.extend_from_slice(&((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWSETELEM).to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&[0; 8]);
        m.extend_from_slice(&payload);
        m
    }

    fn done() -> Vec<u8> {
        let mut m = 20u32.to_ne_bytes().to_vec();
        m.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
        m.extend_from_slice(&[0; 14]);
        m
    }

    #[test]
    fn element_keys_are_read_from_the_dump_messages() {
        let mut out = Vec::new();
        let buf = [message(&[&[198, 51, 100, 7], &[10, 0, 0, 1]], 2), message(&[&[192, 0, 2, 1]], 2)].concat();
        assert_eq!(parse_messages(&buf, &mut out, 4).unwrap(), Batch::More);
        assert_eq!(parse_messages(&done(), &mut out, 4).unwrap(), Batch::Done);
        let got: Vec<[u8; 4]> = out.iter().map(|k| k[..4].try_into().unwrap()).collect();
        assert_eq!(got, vec![[198, 51, 100, 7], [10, 0, 0, 1], [192, 0, 2, 1]]);
        // A dump interrupted by a concurrent change is said so, to be started again.
        let buf = [message(&[&[10, 0, 0, 2]], NLM_F_DUMP_INTR), done()].concat();
        assert_eq!(parse_messages(&buf, &mut Vec::new(), 4).unwrap(), Batch::Interrupted);
        // A key of the wrong size is an error, not a wrong address.
        assert!(parse_messages(&message(&[&[1, 2, 3, 4]], 2), &mut Vec::new(), 16).is_err());
        // The kernel's error (ENOENT: no such set).
        let mut err = 36u32.to_ne_bytes().to_vec();
        err.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        err.extend_from_slice(&[0; 10]);
        err.extend_from_slice(&(-libc::ENOENT).to_ne_bytes());
        err.extend_from_slice(&[0; 16]);
        assert!(parse_messages(&err, &mut Vec::new(), 4).unwrap_err().to_string().contains("No such file"));
        assert_eq!(request("fwc", "bl_v4_32_s1", 7).len(), 16 + 4 + 8 + 16);
    }
}
