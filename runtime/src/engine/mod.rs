//! The engine behind `fwc plan`, `fwc apply`, `fwc confirm`, `fwc rollback`, `fwc status` and
//! the agent: observe → plan → apply (one transaction over every backend) → verify → record.
//! One module per job; the CLI (`cli/apply.rs`) only parses arguments, calls these and renders.
//!
//! - [`load`] — what to apply: a rule repository, an artifact dir or a saved plan;
//! - [`observe`] — drift of the QoS and forwarder dataplanes (nftables: its backend);
//! - [`plan`] — the plan against the live host ([`plan::LivePlan`]) and its freshness check;
//! - [`transaction`] — prepare, commit and verify every backend, roll all back on failure;
//! - [`record`] — a transaction together with its audit record (used by the CLI and the agent);
//! - [`confirm`] — confirm-or-revert and rollback;
//! - [`status`] — what is applied, drift, pending confirmation, counters;
//! - [`target`] — `--netns` and `--state-dir` must name something that exists.

pub mod confirm;
pub mod host_needs;
pub mod load;
pub mod observe;
pub mod plan;
pub mod record;
pub mod status;
pub mod target;
pub mod transaction;
