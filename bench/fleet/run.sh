#!/usr/bin/env bash
# Fleet rollout simulation (docs/performance.md, "Fleet rollout: 1000 simulated agents").
#
# HOSTS simulated agents (the agent's real follow core, real libgit2 fetches into one bare
# mirror each, per-host jitter, a simulated dataplane) poll a local git smart-HTTP server (`git
# http-backend` behind a counting front) every POLL seconds; the real controller core decides
# every 2 s. Scenario 1: a rollout from nothing to 100 %. Scenario 2: a commit that fails on
# the canary wave: the halt, and how fast every agent sees it. Prints one JSON report.
#
# usage: bench/fleet/run.sh [HOSTS=1000] [POLL=30] [WORKERS=8]   (needs git; no root)
set -euo pipefail
cd "$(dirname "$0")/../.."
# A debug build (dependencies at opt-level 1, Cargo.toml): the git server side is the system git.
cargo build -p fwc-bench --bin fwc-fleet-sim >&2
exec target/debug/fwc-fleet-sim "${1:-1000}" "${2:-30}" "${3:-8}"
