//! `manifest.json`: what was compiled for which host, where every rule went, the hash of every
//! other artifact, and what the runtime must set up beside the rulesets ([`HostSetup`]).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{BackendKind, RuleKind};

/// `manifest.json`: what was compiled, for which host, and where every rule went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub version: u32,
    pub host: String,
    /// Git commit of the rule repository, when known.
    pub commit: Option<String>,
    /// Sorted by (kind, name).
    pub rules: Vec<ManifestRule>,
    /// sha256 of `nftables.json`, `qos.json`, `forward.json` as written.
    pub artifact_hashes: BTreeMap<String, String>,
    /// What the runtime must set up on the host beside the rulesets. Absent in manifests
    /// written before it existed (read as nothing needed).
    #[serde(default)]
    pub setup: HostSetup,
    /// Schedules (`during=`, `until=`): the instant (RFC 3339, UTC) from which these artifacts
    /// are no longer right (a time zone's next daylight-saving change, a rule's expiry); the
    /// agent compiles the same commit again then. Absent: right for ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_until: Option<String>,
}

/// What a host needs beside the rulesets, decided by the compiler (which knows every rule's
/// targets) so the runtime never re-derives it from the generated nftables JSON.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HostSetup {
    /// Kernel settings the rules rely on (the runtime sets them before loading the rules,
    /// reports them, and restores them when the apply fails).
    pub sysctls: Vec<SysctlSetting>,
    /// Interfaces rules name that must exist on the host (the QoS program is attached to
    /// their egress), sorted. QoS classes without interfaces attach to every interface that is
    /// up and are not listed here.
    pub interfaces: Vec<String>,
    /// Traffic quotas of this host's rules (`quota=`), sorted by rule: the runtime restores
    /// their usage into the kernel, resets them at the period's anchor and reports them.
    /// Absent when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quotas: Vec<crate::quota::QuotaPolicy>,
}

/// One kernel setting a ruleset needs: `sysctl -w <key>=<value>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SysctlSetting {
    pub key: String,
    pub value: String,
    /// Why, for humans (`kernel forwards to IPv4 targets`).
    pub reason: String,
}

impl SysctlSetting {
    /// `net.ipv4.ip_forward=1`: kernel forwards to IPv4 targets on other hosts.
    pub fn ipv4_forwarding() -> SysctlSetting {
        SysctlSetting::new("net.ipv4.ip_forward", "1", "kernel forwards to IPv4 targets")
    }
    /// `net.ipv6.conf.all.forwarding=1`: kernel forwards to IPv6 targets on other hosts.
    pub fn ipv6_forwarding() -> SysctlSetting {
        SysctlSetting::new("net.ipv6.conf.all.forwarding", "1", "kernel forwards to IPv6 targets")
    }
    /// `net.ipv4.conf.all.route_localnet=1`: DNAT to 127.0.0.0/8 of packets from elsewhere.
    pub fn route_localnet() -> SysctlSetting {
        SysctlSetting::new("net.ipv4.conf.all.route_localnet", "1", "forwards to a 127.0.0.0/8 target")
    }
    fn new(key: &str, value: &str, reason: &str) -> SysctlSetting {
        SysctlSetting { key: key.into(), value: value.into(), reason: reason.into() }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ManifestRule {
    pub kind: RuleKind,
    pub name: String,
    /// Chain for filter rules (`input`, `forward`, `output`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub chain: Option<String>,
    /// Backends that carry the rule: a capped kernel forward is `["nftables", "qos"]`.
    pub backends: Vec<BackendKind>,
    /// Why it went there, for humans ("DNS target needs userspace").
    pub reason: String,
    /// One line summary of the rule as compiled, shown by `fwc plan`.
    pub summary: String,
    /// sha256 over the rule's compiled definition: equal digest = unchanged rule.
    pub digest: String,
    /// Where the rule is written: `file:line:column` in the repository (`rules/web.kdl:12:5`;
    /// a template's rule: `rules/x.kdl.j2 (rendered for host h):LINE:COL`); for a chain, its
    /// `policy=`. Lets drift reports and `nft list ruleset` readers (comment `fwc:<kind>:<name>`)
    /// find the line of an applied generation. Not part of the digest: moving a rule is no change.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub source: Option<String>,
}
