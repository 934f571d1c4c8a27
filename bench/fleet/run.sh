#!/usr/bin/env bash
# Fleet rollout simulation (docs/performance.md, "Fleet rollout: 1000 simulated agents").
#
# HOSTS simulated agents (the agent's real follow core, real libgit2 fetches into one bare
# mirror each, per-host jitter, a simulated dataplane) poll a local git smart-HTTP server (`git
# http-backend` behind a counting front) every POLL seconds; the real controller core decides
# every 2 s. Scenario 1: a rollout from nothing to 100 %. Scenario 2: a commit that fails on
# the canary wave: the halt, and how fast every agent sees it. Prints one JSON report.
#
# usage: [FWC_SIM_SERVER=nginx|lighttpd] [FWC_SIM_POLL=refs] bench/fleet/run.sh [HOSTS=1000] [POLL=30] [WORKERS=8]
#        (needs git; nginx-light and fcgiwrap for FWC_SIM_SERVER=nginx, lighttpd for
#        FWC_SIM_SERVER=lighttpd; root only to count the server's CPU in a cpuacct cgroup, else
#        the process tree's, a lower bound). Under ../shared/quiet use lighttpd: it waits for
#        its git CGIs, so their CPU is the benchmark's own (fcgiwrap lets the kernel reap them,
#        and quiet then counts them as other work).
set -euo pipefail
cd "$(dirname "$0")/../.."
# A release build: the simulated agents must keep their poll rate (the git server side is the
# system git, or nginx + fcgiwrap / lighttpd with FWC_SIM_SERVER; FWC_SIM_POLL=refs: static info/refs polls).
cargo build --release -p fwc-bench --bin fwc-fleet-sim >&2
exec target/release/fwc-fleet-sim "${1:-1000}" "${2:-30}" "${3:-8}"
