//! The address family (IPv4 / IPv6) a half of a rule is for, and what differs between them
//! in nft's spelling.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use nftables::stmt::NATFamily;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Fam {
    V4,
    V6,
}

pub(super) const FAMS: [Fam; 2] = [Fam::V4, Fam::V6];

impl Fam {
    pub(super) fn of(ip: &IpAddr) -> Fam {
        if ip.is_ipv4() {
            Fam::V4
        } else {
            Fam::V6
        }
    }
    pub(super) fn idx(self) -> usize {
        self as usize
    }
    /// Payload protocol name: `ip` / `ip6`.
    pub(super) fn proto(self) -> &'static str {
        match self {
            Fam::V4 => "ip",
            Fam::V6 => "ip6",
        }
    }
    pub(super) fn nat(self) -> NATFamily {
        match self {
            Fam::V4 => NATFamily::IP,
            Fam::V6 => NATFamily::IP6,
        }
    }
    pub(super) fn nfproto(self) -> &'static str {
        match self {
            Fam::V4 => "ipv4",
            Fam::V6 => "ipv6",
        }
    }
    pub(super) fn bits(self) -> u32 {
        match self {
            Fam::V4 => 32,
            Fam::V6 => 128,
        }
    }
    /// The prefix length of the interval `lo..=hi` if it is exactly one network.
    pub(super) fn prefix_len(self, lo: u128, hi: u128) -> Option<u32> {
        let diff = lo ^ hi;
        let host_bits = 128 - diff.leading_zeros();
        let is_prefix = diff.count_ones() == host_bits && lo & diff == 0;
        (is_prefix && host_bits <= self.bits()).then(|| self.bits() - host_bits)
    }
    pub(super) fn addr(self, v: u128) -> IpAddr {
        match self {
            Fam::V4 => IpAddr::V4(Ipv4Addr::from(v as u32)),
            Fam::V6 => IpAddr::V6(Ipv6Addr::from(v)),
        }
    }
}
