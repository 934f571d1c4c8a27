//! Fleet rollout (issue 23) on the runtime side: what an agent does with the rollout state.

pub mod follow;
