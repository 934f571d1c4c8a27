//! MSS clamping: `forward { clamp-mss "wan" out="ppp0" }` rewrites the MSS option of TCP
//! SYNs (and SYN-ACKs) routed through the host to what the route's MTU allows
//! (`mss=1452`: to that number), so that connections across a link with a smaller MTU (PPPoE,
//! a tunnel) do not stall on segments too big for it (Shorewall's CLAMPMSS, OpenWrt's mtu_fix,
//! iptables' `TCPMSS --clamp-mss-to-pmtu`).
//!
//! nft: `tcp flags & (syn|rst) == syn tcp option maxseg size set rt mtu` (or `set 1452`), with
//! the rule's interface and address matches, in its own base chain `forward_mangle` at the
//! mangle priority (-150, as OpenWrt's fw4): it runs on every SYN before the forward filter
//! chain decides, whatever rule then accepts it. A clamp is not a verdict: the evaluator
//! records it (`fwc explain` shows it) and the flow's fate does not change.

use nftables::expr::{Expression, NamedExpression, TcpOption, RT, RTKey};
use nftables::stmt::{Mangle, Statement};

use crate::model::header::TcpFlags;

/// The base chain of the clamps.
pub const CHAIN: &str = "forward_mangle";
/// nftables' mangle priority.
pub const PRIORITY: i32 = -150;

/// The packets a clamp rewrites: SYN set, RST not (a SYN or a SYN-ACK; iptables'
/// `--tcp-flags SYN,RST SYN`).
pub const SYN_FLAGS: TcpFlags = TcpFlags { set: 0x02, mask: 0x02 | 0x04, negated: false };

/// The smallest and largest `mss=` (IPv4's minimum MSS; the largest an IPv4 packet holds).
pub const MSS_RANGE: (i128, i128) = (536, 65495);

/// `tcp option maxseg size set rt mtu` / `… set 1452`.
pub fn set_mss(mss: Option<u16>) -> Statement<'static> {
    let value = match mss {
        Some(n) => Expression::Number(u32::from(n)),
        None => Expression::Named(NamedExpression::RT(RT { key: RTKey::MTU, family: None })),
    };
    Statement::Mangle(Mangle { key: Expression::Named(NamedExpression::TcpOption(TcpOption { name: "maxseg".into(), field: Some("size".into()) })), value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statement_is_nfts() {
        let j = serde_json::to_value(set_mss(None)).unwrap();
        assert_eq!(j, serde_json::json!({"mangle": {"key": {"tcp option": {"name": "maxseg", "field": "size"}}, "value": {"rt": {"key": "mtu"}}}}));
        let j = serde_json::to_value(set_mss(Some(1452))).unwrap();
        assert_eq!(j["mangle"]["value"], serde_json::json!(1452));
    }
}
