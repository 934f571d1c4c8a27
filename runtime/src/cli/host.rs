//! The options every command that touches the live host shares (state dir, network
//! namespace, lock wait).

use std::path::PathBuf;
use std::time::Duration;

use crate::state;

pub(super) fn default_state_dir() -> PathBuf {
    PathBuf::from(state::DEFAULT_STATE_DIR)
}

/// Options shared by the commands that touch the live host.
#[derive(Debug, Clone, clap::Args)]
pub struct HostArgs {
    /// State dir: applied artifacts, previous generation, lock.
    #[arg(long, env = "FWC_STATE_DIR", default_value_os_t = default_state_dir())]
    pub state_dir: PathBuf,
    /// Run nft and sysctl inside this network namespace (`ip netns exec NS …`).
    #[arg(long, value_hint = clap::ValueHint::Other, env = "FWC_NETNS")]
    pub netns: Option<String>,
    /// How long to wait for the state lock another fwc command holds (e.g. 0s, 30s, 5m);
    /// then fail with exit 1 and change nothing. Default: wait as long as it takes.
    #[arg(long, value_parser = super::parse_duration, env = "FWC_LOCK_TIMEOUT")]
    pub lock_timeout: Option<Duration>,
}
