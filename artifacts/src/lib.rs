//! fwc-artifacts: the contract between the compiler and everything that consumes its output
//! (runtime, userspace forwarder, eBPF loader). Types of the four artifact files, rule kinds and
//! backends, the mark bits, and the rule identity every nft object carries (`fwc:<kind>:<name>`).
//!
//! Light on purpose (serde, schemars, sha2): no parser, no template engine, no diagnostics.

#![forbid(unsafe_code)]

mod digest;
mod files;
mod forward;
pub mod identity;
mod kinds;
mod manifest;
mod marks;
mod nftdoc;
pub mod nfttext;
mod qos;
pub mod quota;
pub mod rollout;
mod schema;
pub mod window;

pub use digest::*;
pub use files::*;
pub use forward::*;
pub use identity::{parse_rule_comment, rule_comment, RuleId, COMMENT_PREFIX, MAX_COMMENT};
pub use kinds::*;
pub use manifest::*;
pub use marks::*;
pub use nftdoc::NftDoc;
pub use qos::*;
pub use schema::schemas;

/// Version of the artifact formats; bumped on incompatible change.
pub const ARTIFACT_VERSION: u32 = 1;

/// The name of the nftables table fwc owns (family `inet`). fwc never touches other tables.
pub const NFT_TABLE: &str = "fwc";
