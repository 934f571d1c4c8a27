//! The per-host artifacts the compiler produces and the runtime applies: `nftables.json`,
//! `qos.json`, `forward.json` and `manifest.json`. These types are the contract between
//! compiler and runtime; `schemas/` holds their JSON Schemas, generated from these types.

use std::collections::BTreeMap;
use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::model::RuleKind;

/// Version of the artifact formats; bumped on incompatible change.
pub const ARTIFACT_VERSION: u32 = 1;

/// The name of the nftables table fwc owns (family `inet`). fwc never touches other tables.
pub const NFT_TABLE: &str = "fwc";

/// Bits of `skb->mark` / `ct mark` that carry the QoS class. fwc leaves the other bits alone,
/// so it coexists with other users of marks (kube-proxy, wireguard, …).
pub const QOS_MARK_MASK: u32 = 0x0fff_0000;
/// Shift of the class id inside the mark: `mark = class_id << QOS_MARK_SHIFT`.
pub const QOS_MARK_SHIFT: u32 = 16;
/// Class ids are 1..=QOS_MAX_CLASS_ID (0 means "no class").
pub const QOS_MAX_CLASS_ID: u32 = QOS_MARK_MASK >> QOS_MARK_SHIFT;

/// All four artifacts of one host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Artifacts {
    /// libnftables JSON (`{"nftables": [...]}`) that creates `table inet fwc` from scratch.
    pub nftables: serde_json::Value,
    pub qos: QosArtifact,
    pub forward: ForwardArtifact,
    pub manifest: Manifest,
}

/// File names of the artifacts inside an artifact directory.
pub const NFTABLES_FILE: &str = "nftables.json";
pub const QOS_FILE: &str = "qos.json";
pub const FORWARD_FILE: &str = "forward.json";
pub const MANIFEST_FILE: &str = "manifest.json";

impl Artifacts {
    /// The exact bytes of each artifact file, in a stable order. Every JSON file is pretty
    /// printed with a trailing newline so diffs and hashes are stable.
    pub fn files(&self) -> Vec<(&'static str, String)> {
        vec![
            (NFTABLES_FILE, to_pretty(&self.nftables)),
            (QOS_FILE, to_pretty(&self.qos)),
            (FORWARD_FILE, to_pretty(&self.forward)),
            (MANIFEST_FILE, to_pretty(&self.manifest)),
        ]
    }

    /// Read an artifact directory written by [`Artifacts::files`] (`fwc compile --out`, the state dir).
    pub fn read_dir(dir: &Path) -> Result<Artifacts, ArtifactReadError> {
        fn read<T: serde::de::DeserializeOwned>(dir: &Path, name: &str) -> Result<T, ArtifactReadError> {
            let path = dir.join(name);
            let text = std::fs::read_to_string(&path)
                .map_err(|e| ArtifactReadError { path: path.display().to_string(), reason: e.to_string() })?;
            serde_json::from_str(&text)
                .map_err(|e| ArtifactReadError { path: path.display().to_string(), reason: e.to_string() })
        }
        Ok(Artifacts {
            nftables: read(dir, NFTABLES_FILE)?,
            qos: read(dir, QOS_FILE)?,
            forward: read(dir, FORWARD_FILE)?,
            manifest: read(dir, MANIFEST_FILE)?,
        })
    }
}

#[derive(Debug, thiserror::Error)]
#[error("cannot read artifact {path}: {reason}")]
pub struct ArtifactReadError {
    pub path: String,
    pub reason: String,
}

pub fn to_pretty<T: Serialize>(v: &T) -> String {
    let mut s = serde_json::to_string_pretty(v).expect("artifacts always serialize");
    s.push('\n');
    s
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// `sha256_hex(to_pretty(v))` without building the text (artifacts can be tens of MB).
pub fn sha256_pretty<T: Serialize>(v: &T) -> String {
    let mut h = HashWriter(Sha256::new());
    serde_json::to_writer_pretty(&mut h, v).expect("artifacts always serialize");
    h.0.update(b"\n");
    hex::encode(h.0.finalize())
}

/// `sha256_hex(serde_json::to_string(v))` without building the text.
pub fn sha256_compact<T: Serialize>(v: &T) -> String {
    let mut h = HashWriter(Sha256::new());
    serde_json::to_writer(&mut h, v).expect("artifacts always serialize");
    hex::encode(h.0.finalize())
}

/// An `io::Write` that feeds a hash.
struct HashWriter(Sha256);

impl std::io::Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// qos.json

/// `qos.json`: the token-bucket classes the eBPF QoS program enforces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct QosArtifact {
    pub version: u32,
    /// Bits of the packet mark that carry the class (see [`QOS_MARK_MASK`]).
    pub mark_mask: u32,
    /// Sorted by `id`.
    pub classes: Vec<QosClass>,
}

/// Which way a class's traffic flows, relative to the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum QosDirection {
    /// Forward: client -> target (the connection's original direction). Shape: the shaped traffic.
    Up,
    /// Forward: target -> client (the reply direction).
    Down,
}

/// One token bucket. Packets whose `mark & mark_mask == mark` are charged to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QosClass {
    /// Class id, 1..=4095, stable across compiles (derived from the rule name and direction).
    pub id: u32,
    /// `id << 16`: the value the nftables rules put into `ct mark` / `meta mark`.
    pub mark: u32,
    /// `forward` or `shape`.
    pub kind: RuleKind,
    /// The rule this class enforces.
    pub rule: String,
    pub direction: QosDirection,
    /// Sustained rate in bytes per second (wire length).
    pub rate_bytes_per_sec: u64,
    /// Bucket depth in bytes: default max(0.5 s of rate, 64 KiB).
    pub burst_bytes: u64,
    /// Interfaces whose egress the program is attached to; empty = every non-loopback
    /// interface that is up (a forward's traffic can leave on any of them).
    pub interfaces: Vec<String>,
}

// ---------------------------------------------------------------------------------------------
// forward.json

/// `forward.json`: the listeners the userspace forwarder runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct ForwardArtifact {
    pub version: u32,
    /// Sorted by (rule, proto, listen port).
    pub listeners: Vec<Listener>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ListenerProto {
    Tcp,
    Udp,
}

/// One listening socket of the forwarder. A rule with a port range or `proto="both"` becomes
/// several listeners with the same `rule`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Listener {
    pub rule: String,
    pub proto: ListenerProto,
    /// Address to bind: `0.0.0.0`, `::` (dual stack) or a literal.
    pub listen_addr: String,
    pub listen_port: u16,
    /// Targets in order; connections are balanced round-robin and a failed connect tries the next.
    pub targets: Vec<ForwardTarget>,
    /// Allowed client networks (CIDR); empty = everyone.
    pub allow_from: Vec<String>,
    /// Client -> target cap in bytes/s, shared by all connections of the rule.
    pub up_bytes_per_sec: Option<u64>,
    /// Target -> client cap in bytes/s, shared by all connections of the rule.
    pub down_bytes_per_sec: Option<u64>,
    pub burst_bytes: Option<u64>,
    /// Most concurrent connections (TCP) or sessions (UDP) of this rule.
    pub max_conns: Option<u32>,
    /// Most new connections of this rule per period (token bucket: `count` per `period_secs`,
    /// bursts up to `burst`).
    pub conn_rate: Option<ConnRateLimit>,
    /// PROXY protocol version (1 or 2) sent to the target on connect.
    pub proxy_protocol: Option<u8>,
    pub idle_timeout_ms: u64,
    pub connect_timeout_ms: u64,
    /// TLS server name this listener routes (`www.example.com`, or `*.example.com` for one
    /// label). Several TCP listeners may share an address and port when each has its own
    /// name; at most one of them has none (the fallback). The forwarder reads the ClientHello
    /// to route and never decrypts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sni: Option<String>,
}

/// A new-connection rate: `count` per `period_secs`, with bursts up to `burst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConnRateLimit {
    pub count: u32,
    pub period_secs: u32,
    pub burst: u32,
}

/// A forward target: host (IP literal or DNS name) and port.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForwardTarget {
    pub host: String,
    pub port: u16,
}

/// Default idle timeout of userspace TCP connections and UDP sessions.
pub const DEFAULT_TCP_IDLE_TIMEOUT_MS: u64 = 3_600_000;
pub const DEFAULT_UDP_IDLE_TIMEOUT_MS: u64 = 60_000;
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 5_000;

// ---------------------------------------------------------------------------------------------
// manifest.json

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
}

// ---------------------------------------------------------------------------------------------
// JSON Schemas

/// JSON Schemas of every artifact, by file name, generated from the types above (nftables.json
/// follows libnftables' own schema, which is only outlined here).
pub fn schemas() -> BTreeMap<&'static str, serde_json::Value> {
    let mut out = BTreeMap::new();
    out.insert(QOS_FILE, serde_json::to_value(schemars::schema_for!(QosArtifact)).expect("schema serializes"));
    out.insert(FORWARD_FILE, serde_json::to_value(schemars::schema_for!(ForwardArtifact)).expect("schema serializes"));
    out.insert(MANIFEST_FILE, serde_json::to_value(schemars::schema_for!(Manifest)).expect("schema serializes"));
    out.insert(
        NFTABLES_FILE,
        serde_json::json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "nftables.json",
            "description": "libnftables JSON (see libnftables-json(5)) that creates `table inet fwc` from scratch; load with `nft -j -f`. Each command is an object with one key (add, ...).",
            "type": "object",
            "required": ["nftables"],
            "additionalProperties": false,
            "properties": {
                "nftables": {
                    "type": "array",
                    "items": { "type": "object", "minProperties": 1, "maxProperties": 1 }
                }
            }
        }),
    );
    out
}
