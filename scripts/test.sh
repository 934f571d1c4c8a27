#!/usr/bin/env bash
# Set up and run every test: compiler, golden snapshots, bad-input corpus, and the privileged
# dataplane tests (network namespaces, real nftables, the eBPF program, the forwarder, git).
# Run as root for the privileged tests; without root they print SKIP.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -eq 0 ]; then bash scripts/setup.sh; fi
for d in "$HOME/.cargo/bin" /root/.cargo/bin; do [ -d "$d" ] && PATH="$d:$PATH"; done
export PATH
# The fuzz harness (compiler/tests/fuzz.rs) runs inside `cargo test` for this long (seconds);
# raise it to fuzz longer (docs/architecture.md "Testing strategy").
export FWC_FUZZ_SECS="${FWC_FUZZ_SECS:-90}"
cargo build --workspace --all-targets
cargo test --workspace --no-fail-fast "$@"
