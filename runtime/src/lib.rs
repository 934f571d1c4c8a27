//! fwc-runtime: everything that touches a live host. The compiler (`fwc-compiler`) produces
//! artifacts; this crate applies them through one [`backend::Backend`] per dataplane, and
//! hosts the CLI, the agent, metrics and the audit log.

pub mod agent;
pub mod engine;
pub mod http;
pub mod audit;
pub mod backend;
pub mod cli;
pub mod detached;
pub mod import;
pub mod kernel_eval;
pub mod metrics;
pub mod quota;
pub mod repo;
pub mod rollout;
pub mod state;
