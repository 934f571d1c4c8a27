//! The target of a host command: the network namespace (`--netns`) and the state dir
//! (`--state-dir`) must name something that exists, or the command would silently plan
//! against, or report on, nothing.

use miette::{miette, Result};

use crate::state::StateDir;

/// `--netns NS` must name a namespace made by `ip netns add` (`/run/netns/NS`).
pub fn check_netns(netns: Option<&str>) -> Result<()> {
    let Some(ns) = netns else { return Ok(()) };
    let path = std::path::Path::new("/run/netns").join(ns);
    if ns.is_empty() || ns.contains('/') || !path.exists() {
        return Err(miette!(
            help = "`ip netns list` shows the namespaces; create one with `ip netns add NAME`, or drop --netns / FWC_NETNS to use the current namespace",
            "network namespace {ns:?} does not exist (no {})",
            path.display()
        ));
    }
    Ok(())
}

/// For commands that read what was applied (`status`, `confirm`, `rollback`): the state dir
/// must exist. (`plan` and `apply` accept a missing one: the first apply creates it.)
pub fn require_state_dir(state: &StateDir) -> Result<()> {
    if !state.path.is_dir() {
        return Err(miette!(
            help = "pass the --state-dir (or FWC_STATE_DIR) that `fwc apply` used; nothing has been applied with this one",
            "state dir {} does not exist",
            state.path.display()
        ));
    }
    Ok(())
}
