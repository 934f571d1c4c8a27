//! `fwc agent`: pull-mode GitOps (being written).

pub mod git;
pub mod verify;
