//! Per-source limits: `rate-per-source=`, `conn-rate-per-source=`,
//! `max-conns-per-source=`, `per-source-prefix4/6=` and `per-source-size=` — their values,
//! the kernel sets that track sources, and the words `plan`/`explain` use for them.
//!
//! # In the kernel
//!
//! Each limit of a rule gets a dynamic set per address family, keyed by the source address
//! masked to its prefix (`ip6 saddr & ffff:ffff:ffff:ffff::`), of at most `size` elements:
//!
//! ```text
//! set _ps_<chain>_<rule>_r_v4 { type ipv4_addr; size N; flags dynamic,timeout; timeout T }   rate
//! set _ps_<chain>_<rule>_c_v4 { type ipv4_addr; size N; flags dynamic }                       count
//! <matches> ct state new update @_ps_…_r_v4 { ip saddr limit rate over R burst B packets } counter drop
//! <matches> ct state new ip saddr != @_ps_…_r_v4 counter drop                  (set full)
//! <matches> ct state new add @_ps_…_c_v4 { ip saddr ct count over N } counter reject
//! <matches> ct state new ip saddr != @_ps_…_c_v4 counter reject                (set full)
//! ```
//!
//! When the set is full the kernel cannot add a new source's element and the `update`/`add`
//! statement does not match (nft_dynset_eval: NFT_BREAK) — without more, the source would go
//! unlimited. The second rule of each pair refuses a source that has no element after the
//! `update`/`add`: a full set refuses *new* sources (fail closed), sources already tracked keep
//! their own limits. Rate elements expire `T` after a source's last new connection (the time
//! its bucket takes to refill, so expiry never forgives anything); count elements are removed
//! by the kernel's set garbage collection once the source has no connection left. So a full set
//! drains by itself.

use crate::model::{EventRate, PerSource};
#[cfg(test)]
use crate::model::TimeUnit;
use crate::read::units::UnitError;

/// Default `per-source-size=`: sources tracked per limit and address family.
pub const DEFAULT_SIZE: u32 = 65_536;
/// Largest `per-source-size=` (a dynamic set's limit in fwc, as `size=` of a dynamic set).
pub const MAX_SIZE: u32 = 16_777_216;
/// Default grouping of IPv4 sources: per address.
pub const DEFAULT_PREFIX4: u8 = 32;
/// Default grouping of IPv6 sources: per /64 (one subscriber's LAN; a host can hop addresses
/// inside its /64 freely).
pub const DEFAULT_PREFIX6: u8 = 64;

/// The burst of a per-source rate: as written, else the count (what the userspace forwarder
/// does for `conn-rate`).
pub fn burst(rate: &EventRate) -> u32 {
    rate.burst.filter(|b| *b > 0).unwrap_or(rate.count)
}

/// Seconds a rate element lives after its source's last new connection: the time a drained
/// bucket takes to refill (at least 1 s), so an expired element is one whose bucket is full
/// again — expiry forgives nothing.
pub fn rate_timeout_s(rate: &EventRate) -> u32 {
    let period = rate.per.seconds();
    let t = (u64::from(burst(rate)) * period).div_ceil(u64::from(rate.count.max(1)));
    u32::try_from(t.max(1)).unwrap_or(u32::MAX)
}

/// Which of a rule's two limits a set tracks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Rate,
    Conns,
}

impl Kind {
    fn tag(self) -> &'static str {
        match self {
            Kind::Rate => "r",
            Kind::Conns => "c",
        }
    }
}

/// The kernel set of a rule's limit: `_ps_<owner>_<name>_<r|c>_v4`; `owner` is the chain
/// (`input`, `forward`, `output`) or `fwd` for a forward (names are unique per chain). The
/// leading `_` keeps them apart from the sets of `set` declarations (their names start with
/// a letter or digit).
pub fn set_name(owner: &str, rule: &str, kind: Kind, v6: bool) -> String {
    format!("{SET_PREFIX}{owner}_{rule}_{}_{}", kind.tag(), if v6 { "v6" } else { "v4" })
}

/// The prefix of every per-source set name. Their elements belong to the kernel (sources
/// seen at run time): drift ignores them and an apply keeps them.
pub const SET_PREFIX: &str = "_ps_";

/// Is this an fwc per-source set name? `(owner, rule, kind, v6)`.
pub fn parse_set_name(name: &str) -> Option<(&str, &str, Kind, bool)> {
    let rest = name.strip_prefix(SET_PREFIX)?;
    let (owner, rest) = rest.split_once('_')?;
    let (rest, fam) = rest.rsplit_once('_')?;
    let (rule, kind) = rest.rsplit_once('_')?;
    let kind = match kind {
        "r" => Kind::Rate,
        "c" => Kind::Conns,
        _ => return None,
    };
    let v6 = match fam {
        "v4" => false,
        "v6" => true,
        _ => return None,
    };
    Some((owner, rule, kind, v6))
}

/// `per-source-prefix4=`: 1-32.
pub fn parse_prefix4(s: &str) -> Result<u8, UnitError> {
    parse_prefix(s, 32, "per-source-prefix4", DEFAULT_PREFIX4)
}

/// `per-source-prefix6=`: 1-128.
pub fn parse_prefix6(s: &str) -> Result<u8, UnitError> {
    parse_prefix(s, 128, "per-source-prefix6", DEFAULT_PREFIX6)
}

fn parse_prefix(s: &str, max: u8, key: &str, default: u8) -> Result<u8, UnitError> {
    let t = s.trim().trim_start_matches('/');
    let help = format!(
        "a prefix length from 1 to {max}: sources in one /{default} (the default) share one limit; {key}={max} limits each address on its own (a limit shared by all sources is rate=/max-conns=)"
    );
    match t.parse::<u8>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(UnitError { message: format!("\"{s}\" is not a prefix length from 1 to {max}"), help }),
    }
}

/// `per-source-size=`: 1 to [`MAX_SIZE`] sources.
pub fn parse_size(s: &str) -> Result<u32, UnitError> {
    let help = format!(
        "how many sources the kernel tracks per limit and address family, 1 to {MAX_SIZE} (default {DEFAULT_SIZE}); when the set is full new sources are refused until tracked ones expire"
    );
    match s.trim().replace('_', "").parse::<u64>() {
        Ok(n) if (1..=u64::from(MAX_SIZE)).contains(&n) => Ok(n as u32),
        _ => Err(UnitError { message: format!("\"{s}\" is not a number of sources from 1 to {MAX_SIZE}"), help }),
    }
}

/// The per-source part of a rule's one-line summary (`fwc plan`, the manifest): the limits,
/// the grouping, the set size and what a full set does.
pub fn summary(p: &PerSource) -> String {
    let mut out = String::from(" per-source");
    if let Some(r) = &p.rate {
        out.push_str(&format!(" rate {}/{} burst {}", r.value.count, r.value.per.as_str(), burst(&r.value)));
    }
    if let Some(m) = &p.max_conns {
        out.push_str(&format!(" max-conns {}", m.value));
    }
    out.push_str(&format!(
        " (sources by IPv4 /{} IPv6 /{}; tracks up to {} sources per family, when full new sources are refused)",
        p.prefix4, p.prefix6, p.size
    ));
    out
}

/// The mask of an IPv6 prefix as nft writes it (`ffff:ffff:ffff:ffff::`).
pub fn mask6(prefix: u8) -> std::net::Ipv6Addr {
    let bits: u128 = if prefix == 0 { 0 } else { u128::MAX << (128 - u32::from(prefix)) };
    std::net::Ipv6Addr::from(bits)
}

/// The mask of an IPv4 prefix (`255.255.255.0`).
pub fn mask4(prefix: u8) -> std::net::Ipv4Addr {
    let bits: u32 = if prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(prefix)) };
    std::net::Ipv4Addr::from(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_the_refill_time() {
        let r = EventRate { count: 5, per: TimeUnit::Minute, burst: Some(5) };
        assert_eq!(rate_timeout_s(&r), 60);
        let r = EventRate { count: 20, per: TimeUnit::Second, burst: None };
        assert_eq!(rate_timeout_s(&r), 1);
        let r = EventRate { count: 3, per: TimeUnit::Hour, burst: Some(1) };
        assert_eq!(rate_timeout_s(&r), 1200);
    }

    #[test]
    fn set_names_round_trip() {
        let n = set_name("input", "ssh-in", Kind::Rate, true);
        assert_eq!(n, "_ps_input_ssh-in_r_v6");
        assert_eq!(parse_set_name(&n), Some(("input", "ssh-in", Kind::Rate, true)));
        assert_eq!(parse_set_name("_ps_fwd_a_b_c_v4"), Some(("fwd", "a_b", Kind::Conns, false)));
        assert_eq!(parse_set_name("ps_fwd_a_b_c_v4"), None);
        assert_eq!(parse_set_name("office_v4"), None);
    }

    #[test]
    fn values() {
        assert_eq!(parse_prefix6("56").unwrap(), 56);
        assert_eq!(parse_prefix6("/48").unwrap(), 48);
        assert!(parse_prefix6("129").is_err());
        assert!(parse_prefix6("0").is_err());
        assert!(parse_prefix4("33").is_err());
        assert!(parse_size("0").is_err());
        assert_eq!(parse_size("4").unwrap(), 4);
        assert_eq!(mask6(64).to_string(), "ffff:ffff:ffff:ffff::");
        assert_eq!(mask4(24).to_string(), "255.255.255.0");
    }
}
