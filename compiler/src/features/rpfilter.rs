//! Reverse-path filtering: `prerouting { deny "spoofed" rpfilter="strict" }` drops a packet
//! whose source the host would not route back the way it came (`strict`: by the interface the
//! packet came in, the kernel's `rp_filter=1`; `loose`: by any interface, `rp_filter=2`).
//!
//! nft: `fib saddr . iif oif missing drop` (strict), `fib saddr oif missing drop` (loose), with
//! the rule's other matches. These denies go to their own base chain, `prerouting_rpfilter`,
//! one priority step after the prerouting block's other denies, because of its one exemption:
//! as firewalld's `IPv6_rpfilter` chain, it first accepts ICMPv6 router advertisements and
//! neighbour solicitations (a neighbour solicitation during duplicate address detection comes
//! from `::`, which no route leads back to) — an accept that ends only this chain, so the
//! block's other denies still see those packets. IPv4's DHCP discovery from 0.0.0.0 to the
//! broadcast address needs nothing: nft's `fib` finds such a source on the input interface, as
//! the kernel's own rp_filter does.
//!
//! The evaluator reads `fib saddr` against the flow's route back ([`crate::eval::flow`]'s
//! `back-via`): by default the route back leaves by the interface the flow came in, so a flow
//! that says nothing passes both modes.

use std::collections::HashSet;

use nftables::expr::{Expression, Fib, FibFlag, FibResult, Meta, MetaKey, NamedExpression, Payload, PayloadField, SetItem};
use nftables::stmt::{Match, Operator, Statement};

use crate::model::header::RpFilter;
use crate::read::units::UnitError;

/// The base chain of the rpfilter denies.
pub const CHAIN: &str = "prerouting_rpfilter";

/// ICMPv6 types accepted before the rpfilter denies (firewalld's exemption).
pub const EXEMPT_ICMPV6: [&str; 2] = ["nd-router-advert", "nd-neighbor-solicit"];

/// `rpfilter="strict"` / `"loose"`.
pub fn parse(s: &str) -> Result<RpFilter, UnitError> {
    match s.trim() {
        "strict" => Ok(RpFilter::Strict),
        "loose" => Ok(RpFilter::Loose),
        other => Err(UnitError {
            message: format!("\"{other}\" is not a reverse-path filtering mode"),
            help: "rpfilter=\"strict\" (the route back to the source leaves by the interface the packet came in) or rpfilter=\"loose\" (some route back exists)".into(),
        }),
    }
}

/// `fib saddr . iif oif missing` (strict) / `fib saddr oif missing` (loose).
pub fn fib_missing(mode: RpFilter) -> Statement<'static> {
    let mut flags = HashSet::from([FibFlag::Saddr]);
    if mode == RpFilter::Strict {
        flags.insert(FibFlag::Iif);
    }
    Statement::Match(Match {
        left: Expression::Named(NamedExpression::Fib(Fib { result: FibResult::Oif, flags })),
        right: Expression::Boolean(false),
        op: Operator::EQ,
    })
}

/// `meta l4proto ipv6-icmp icmpv6 type { nd-router-advert, nd-neighbor-solicit } accept`: the
/// chain's first rule.
pub fn exemption() -> Vec<Statement<'static>> {
    let types = EXEMPT_ICMPV6.iter().map(|t| SetItem::Element(Expression::String((*t).into()))).collect();
    vec![
        Statement::Match(Match {
            left: Expression::Named(NamedExpression::Meta(Meta { key: MetaKey::L4proto })),
            right: Expression::String("ipv6-icmp".into()),
            op: Operator::EQ,
        }),
        Statement::Match(Match {
            left: Expression::Named(NamedExpression::Payload(Payload::PayloadField(PayloadField { protocol: "icmpv6".into(), field: "type".into() }))),
            right: Expression::Named(NamedExpression::Set(types)),
            op: Operator::EQ,
        }),
        Statement::Accept(None),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_read_and_write_as_nft_does() {
        assert_eq!(parse("strict").unwrap(), RpFilter::Strict);
        assert_eq!(parse("loose").unwrap(), RpFilter::Loose);
        assert!(parse("yes").unwrap_err().help.contains("strict"));
        let json = serde_json::to_value(fib_missing(RpFilter::Strict)).unwrap();
        assert_eq!(json["match"]["right"], serde_json::json!(false));
        let mut flags: Vec<String> = serde_json::from_value(json["match"]["left"]["fib"]["flags"].clone()).unwrap();
        flags.sort();
        assert_eq!(flags, ["iif", "saddr"]);
        let loose = serde_json::to_value(fib_missing(RpFilter::Loose)).unwrap();
        assert_eq!(loose["match"]["left"]["fib"]["flags"], serde_json::json!(["saddr"]));
    }
}
