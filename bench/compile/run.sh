#!/usr/bin/env bash
# Compiler scale bench: compile+emit generated repositories of 1k, 10k and 100k mixed rules,
# 5 runs each in fresh processes; prints medians of wall time and peak RSS as markdown and
# writes the raw JSON lines to bench/compile/results.jsonl.
# Usage: bash bench/compile/run.sh [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/../.."
repeats=${1:-5}
cargo build -q --release -p fwc-bench --bin fwc-bench-compile --bin fwc-bench-kdl
bin="${CARGO_TARGET_DIR:-target}/release"
out=bench/compile/results.jsonl
: > "$out"
for n in 1000 10000 100000; do
  for _ in $(seq "$repeats"); do "$bin/fwc-bench-compile" "$n" >> "$out"; done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| rules | compile+emit (median s) | min–max s | µs/rule | peak RSS (median MiB) | KiB/rule over input | artifact bytes |")
print("|---|---|---|---|---|---|---|")
for n in sorted({r["rules"] for r in rows}):
    rs = [r for r in rows if r["rules"] == n]
    t = [r["compile_emit_seconds"] for r in rs]
    m = statistics.median(t)
    rss = statistics.median(r["peak_rss_kib"] for r in rs) / 1024
    per = statistics.median(r["bytes_per_rule_over_input"] for r in rs) / 1024
    print(f"| {n} | {m:.3f} | {min(t):.3f}–{max(t):.3f} | {m/n*1e6:.0f} | {rss:.0f} | {per:.1f} | {rs[0]['artifact_bytes']} |")
PY
echo
echo "kdl crate parse alone (the generated 10k-rule repository):"
"$bin/fwc-bench-kdl" 2>&1 | grep '^10000'
