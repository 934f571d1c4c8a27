//! What a named thing is ([`RuleKind`]) and which dataplane carries it ([`BackendKind`]); both
//! appear in the manifest, in plans, in rule comments and in diagnostics.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The kind of a named thing, for diagnostics, the manifest and plans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RuleKind {
    Set,
    /// A filter chain as a whole: its policy and the order of its rules.
    Chain,
    Filter,
    Forward,
    Shape,
    /// `masquerade "…"`: source NAT to the out interface's address.
    Masquerade,
    /// `snat "…"`: source NAT to a fixed address.
    Snat,
}

impl RuleKind {
    pub const ALL: [RuleKind; 7] =
        [RuleKind::Set, RuleKind::Chain, RuleKind::Filter, RuleKind::Forward, RuleKind::Shape, RuleKind::Masquerade, RuleKind::Snat];

    pub fn as_str(self) -> &'static str {
        match self {
            RuleKind::Set => "set",
            RuleKind::Chain => "chain",
            RuleKind::Filter => "filter",
            RuleKind::Forward => "forward",
            RuleKind::Shape => "shape",
            RuleKind::Masquerade => "masquerade",
            RuleKind::Snat => "snat",
        }
    }

    /// Inverse of [`RuleKind::as_str`].
    pub fn parse(s: &str) -> Option<RuleKind> {
        RuleKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// The dataplane a rule was compiled to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// nftables (filter, NAT, sets, marks)
    Nftables,
    /// eBPF token buckets (plus the nftables marks that classify the flow)
    Qos,
    /// the userspace splice forwarder
    Userspace,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Nftables => "nftables",
            BackendKind::Qos => "qos",
            BackendKind::Userspace => "userspace",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_kind_names_round_trip() {
        for k in RuleKind::ALL {
            assert_eq!(RuleKind::parse(k.as_str()), Some(k));
            assert_eq!(serde_json::to_value(k).unwrap(), serde_json::Value::String(k.as_str().into()));
        }
        assert_eq!(RuleKind::parse("Forward"), None);
    }
}
