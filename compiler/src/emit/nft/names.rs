//! Names in `table inet fwc` (chains, maps, sets), the rule comment (from `fwc_artifacts`),
//! nft's length limits and defaults.

/// Chain names of `table inet fwc`.
pub mod chains {
    pub const INPUT: &str = "input";
    pub const FORWARD: &str = "forward";
    pub const OUTPUT: &str = "output";
    pub const CONTAINERS: &str = "containers";
    pub const CONTAINERS_RULES: &str = "containers_rules";
    pub const FWD_DNAT: &str = "fwd_dnat";
    pub const FWD_GUARD: &str = "fwd_guard";
    pub const PREROUTING: &str = "prerouting";
    pub const NAT_OUTPUT: &str = "nat_output";
    pub const POSTROUTING: &str = "postrouting";
    pub const QOS_CLASSIFY: &str = "qos_classify";
    pub const QOS_MARK: &str = "qos_mark";
    pub const QOS_MARK_OUT: &str = "qos_mark_out";
    pub const QOS_APPLY: &str = "qos_apply";
}

/// Map and set names used for kernel forwards.
pub mod maps {
    pub const FWD4_ADDR: &str = "fwd4_addr";
    pub const FWD4_PORT: &str = "fwd4_port";
    pub const FWD4R_ADDR: &str = "fwd4r_addr";
    pub const FWD4R_PORT: &str = "fwd4r_port";
    pub const FWD4_KEEP: &str = "fwd4_keep";
    pub const FWD6_ADDR: &str = "fwd6_addr";
    pub const FWD6_PORT: &str = "fwd6_port";
    pub const FWD6R_ADDR: &str = "fwd6r_addr";
    pub const FWD6R_PORT: &str = "fwd6r_port";
    pub const FWD6_KEEP: &str = "fwd6_keep";
    pub const PORTS_TCP: &str = "fwd_ports_tcp";
    pub const PORTS_UDP: &str = "fwd_ports_udp";
}

pub use fwc_artifacts::identity::{parse_rule_comment, rule_comment, COMMENT_PREFIX, MAX_COMMENT};
pub use fwc_artifacts::FORWARDER_SOCKET_MARK;
pub(super) use crate::read::units::MAX_LOG_PREFIX;
/// nft's default limit burst.
pub(super) const DEFAULT_BURST: u32 = 5;

/// Name of the nft set that holds the `fam` half of fwc set `name`.
pub fn set_name(name: &str, v6: bool) -> String {
    format!("{name}_{}", if v6 { "v6" } else { "v4" })
}

/// Name of the hash set of prefix length `len` of the `fam` half of fwc set `name` (the
/// hash-set layout of a big set, `crate::place::setlayout`): `bl_v4_24`.
pub fn hash_set_name(name: &str, v6: bool, len: u32) -> String {
    format!("{}_{len}", set_name(name, v6))
}

/// Name of shard `index` of that hash set, when it is split
/// (`crate::place::setlayout::Shards`): `bl_v4_32_s5`.
pub fn shard_set_name(name: &str, v6: bool, len: u32, index: u32) -> String {
    format!("{}_s{index}", hash_set_name(name, v6, len))
}

pub(super) fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

pub(super) fn class_chain(id: u32) -> String {
    format!("qos_c{id}")
}
