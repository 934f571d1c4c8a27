#!/usr/bin/env bash
# Set up and run every test: compiler, golden snapshots, bad-input corpus, and the privileged
# dataplane tests (network namespaces, real nftables, the eBPF program, the forwarder, git).
# Run as root for the privileged tests; without root they print SKIP.
# Extra arguments go to `cargo test` (then everything runs in one `cargo test`, as written).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -eq 0 ]; then bash scripts/setup.sh; fi
for d in "$HOME/.cargo/bin" /root/.cargo/bin; do [ -d "$d" ] && PATH="$d:$PATH"; done
export PATH
# The fuzz harness (compiler/tests/fuzz.rs) runs inside `cargo test` for this long (seconds);
# raise it to fuzz longer (docs/architecture.md "Testing strategy").
export FWC_FUZZ_SECS="${FWC_FUZZ_SECS:-90}"
cargo build --workspace --all-targets
if [ $# -gt 0 ]; then
  exec cargo test --workspace --no-fail-fast "$@"
fi
# Three harnesses run for a fixed time, each one process keeping one core busy: the compiler
# fuzzer (FWC_FUZZ_SECS), the import fuzzer and the plan-equals-apply property test (their own
# budgets). One after the other they held the run for about 190 s while the second core idled;
# now the compiler fuzzer runs beside the other two, each with the budget it always had, and
# the rest of the suite skips them afterwards (the eBPF rate tests measure with the machine to
# themselves). Targets are chosen with --workspace so that features resolve as in the build
# above and nothing is compiled twice.
fuzz=fuzz_parse_check_compile
budgeted=(import_readers_survive_mutated_configurations plan_equals_apply_over_random_edit_sequences)
rc=0
fuzz_log=$(mktemp)
cargo test --workspace --test fuzz -- --exact "$fuzz" >"$fuzz_log" 2>&1 &
fuzz_pid=$!
cargo test --workspace --no-fail-fast --test import_fuzz --test apply_plan_property -- --exact "${budgeted[@]}" || rc=1
wait "$fuzz_pid" || rc=1
cat "$fuzz_log"
rm -f "$fuzz_log"
skip=()
for t in "$fuzz" "${budgeted[@]}"; do skip+=(--skip "$t"); done
cargo test --workspace --no-fail-fast -- --exact "${skip[@]}" || rc=1
exit "$rc"
