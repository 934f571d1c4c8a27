//! The git smart-HTTP servers the simulated agents poll: a built-in counting front over
//! `git http-backend` (the default) and real web server stacks (`FWC_SIM_SERVER`).

pub(crate) mod builtin;
pub(crate) mod nginx;
