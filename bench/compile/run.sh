#!/usr/bin/env bash
# Compiler scale bench: compile+emit generated repositories of 1k, 10k and 90k mixed rules,
# 5 runs each in fresh processes; prints medians of wall time and peak RSS as markdown and
# writes the raw JSON lines to bench/compile/results.jsonl.
# Usage: bash bench/compile/run.sh [REPEATS]
# BEFORE=DIR (a directory holding fwc-bench-compile and fwc-bench-phases of another build, e.g.
# main's) runs both builds interleaved in the same run and prints them side by side as ratios.
set -euo pipefail
cd "$(dirname "$0")/../.."
repeats=${1:-5}
cargo build -q --release -p fwc-bench --bin fwc-bench-compile --bin fwc-bench-kdl --bin fwc-bench-phases
bin="${CARGO_TARGET_DIR:-target}/release"
builds=(after)
[ -n "${BEFORE:-}" ] && builds=(before after)
dir_of() { if [ "$1" = before ]; then echo "$BEFORE"; else echo "$bin"; fi; }
out=bench/compile/results.jsonl
: > "$out"
# 90,000 rules is the largest size: with its 9,000 sets it stays under MAX_RULES (100,000
# rules, forwards, shapes, sets and hosts; limits.rs), which 100,000 rules would exceed.
for n in 1000 10000 90000; do
  for _ in $(seq "$repeats"); do
    for b in "${builds[@]}"; do "$(dir_of "$b")/fwc-bench-compile" "$n" | sed "s/^{/{\"build\":\"$b\",/" >> "$out"; done
  done
done
# Per phase at 10k (stderr lines "phase duration"), same interleaving.
phases=$(mktemp)
for _ in $(seq "$repeats"); do
  for b in "${builds[@]}"; do "$(dir_of "$b")/fwc-bench-phases" 10000 2>&1 | sed "s/^/$b /" >> "$phases"; done
done
python3 - "$out" "$phases" <<'PY'
import json, re, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
builds = [b for b in ("before", "after") if any(r["build"] == b for r in rows)]
print("| rules | build | compile+emit (median s) | min–max s | µs/rule | peak RSS (median MiB) | KiB/rule over input | artifact bytes |")
print("|---|---|---|---|---|---|---|---|")
med = {}
for n in sorted({r["rules"] for r in rows}):
    for b in builds:
        rs = [r for r in rows if r["rules"] == n and r["build"] == b]
        t = [r["compile_emit_seconds"] for r in rs]
        m = statistics.median(t)
        rss = statistics.median(r["peak_rss_kib"] for r in rs) / 1024
        per = statistics.median(r["bytes_per_rule_over_input"] for r in rs) / 1024
        med[(n, b)] = (m, rss)
        print(f"| {n} | {b} | {m:.3f} | {min(t):.3f}–{max(t):.3f} | {m/n*1e6:.0f} | {rss:.0f} | {per:.1f} | {rs[0]['artifact_bytes']} |")
if len(builds) == 2:
    print()
    print("| rules | time after/before | peak RSS after/before |")
    print("|---|---|---|")
    for n in sorted({r["rules"] for r in rows}):
        (tb, rb), (ta, ra) = med[(n, "before")], med[(n, "after")]
        print(f"| {n} | {ta/tb:.2f}x | {ra/rb:.2f}x |")
units = {"s": 1e3, "ms": 1, "µs": 1e-3, "ns": 1e-6}
ph = {}
for line in open(sys.argv[2]):
    m = re.match(r"(\w+) (\S+)\s+([\d.]+)(s|ms|µs|ns)$", line.strip())
    if m:
        ph.setdefault((m[2], m[1]), []).append(float(m[3]) * units[m[4]])
print()
print("Per phase at 10,000 rules (`fwc-bench-phases 10000`), median ms (min–max):")
print()
print("| phase | " + " | ".join(builds) + " |")
print("|---|" + "---|" * len(builds))
for p in ("parse", "check", "select", "nft", "qos+fwd", "manifest"):
    cells = []
    for b in builds:
        v = ph.get((p, b), [])
        cells.append(f"{statistics.median(v):.1f} ({min(v):.1f}–{max(v):.1f})" if v else "-")
    print(f"| {p} | " + " | ".join(cells) + " |")
PY
rm -f "$phases"
echo
echo "kdl crate parse alone (the generated 10k-rule repository):"
"$bin/fwc-bench-kdl" 2>&1 | grep '^10000'
