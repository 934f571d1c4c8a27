//! The bounds of a rule's match properties (its hull), computed once per rule so that most
//! pairs of rules are told apart by a few compares before the exact covering test; with the
//! protocol and selector comparisons that test and the shadow index share.

use crate::model::*;

pub(super) fn proto_covers(a: Option<Proto>, b: Option<Proto>) -> bool {
    match (a, b) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(x), Some(y)) => x == y || (x == Proto::Both && matches!(y, Proto::Tcp | Proto::Udp)),
    }
}

/// Bounds of a rule's match properties, computed once per rule: a rule can only cover
/// another whose bounds lie inside its own, so most pairs are rejected by a few compares
/// before the exact test (the linter's `covers`).
pub(super) struct Hull {
    pub(super) rate: bool,
    pub(super) proto: Option<Proto>,
    pub(super) ports: Option<(u16, u16)>,
    pub(super) sports: Option<(u16, u16)>,
    pub(super) from: AddrHull,
    pub(super) to: AddrHull,
}

pub(super) enum AddrHull {
    Any,
    /// A dynamic set: only the exact test knows.
    Unknown,
    /// Lowest and highest address per family (None: no address of that family).
    Bounds([Option<(u128, u128)>; 2]),
}

impl Hull {
    /// False only when `self` cannot cover `b` (a necessary condition of `covers`).
    pub(super) fn may_cover(&self, b: &Hull) -> bool {
        let range = |a: Option<(u16, u16)>, b: Option<(u16, u16)>| match (a, b) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(a), Some(b)) => a.0 <= b.0 && b.1 <= a.1,
        };
        let addr = |a: &AddrHull, b: &AddrHull| match (a, b) {
            (AddrHull::Any, _) | (AddrHull::Unknown, _) | (_, AddrHull::Unknown) => true,
            (_, AddrHull::Any) => false,
            (AddrHull::Bounds(a), AddrHull::Bounds(b)) => (0..2).all(|f| match (a[f], b[f]) {
                (_, None) => true,
                (None, Some(_)) => false,
                (Some(a), Some(b)) => a.0 <= b.0 && b.1 <= a.1,
            }),
        };
        !self.rate
            && proto_covers(self.proto, b.proto)
            && range(self.ports, b.ports)
            && range(self.sports, b.sports)
            && addr(&self.from, &b.from)
            && addr(&self.to, &b.to)
    }
}

pub(super) fn selector_key(s: &Option<Spanned<Selector>>) -> Option<String> {
    s.as_ref().map(|s| format!("{:?}", s.value))
}
