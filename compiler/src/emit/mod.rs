//! Emitters: turn a [`crate::place::select::HostPlan`] into the artifacts. One module per artifact;
//! each is a pure function of the plan, with sorted, stable output.

pub mod addrtext;
pub mod forward;
pub mod manifest;
pub mod nft;
pub mod qos;
