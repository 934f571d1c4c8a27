//! The artifact types live in the `fwc-artifacts` crate (the contract between compiler,
//! runtime, forwarder and eBPF loader); re-exported here so `fwc_compiler::artifacts::*` keeps
//! working for code written before the split.

pub use fwc_artifacts::*;
