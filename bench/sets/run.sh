#!/usr/bin/env bash
# Set files at scale: compile time and peak memory of a repository whose only set
# is read from a file of N addresses/networks, and the first apply of that set by `fwc apply`
# against bare `nft -j -f` of the compiled nftables.json, side by side in fresh network
# namespaces. Medians of REPEATS (default 5) with min-max. Needs root, a release build.
#   bash bench/sets/run.sh [N...]      (default: 100000 1000000)
# COMPILE_ONLY=1: only the compile column, by `fwc-bench-dir` (the same compile + file writes as
# `fwc compile`, no runtime build, no root); with BEFORE=DIR (holding another build's
# fwc-bench-dir) both builds run interleaved and are printed side by side.
set -euo pipefail
cd "$(dirname "$0")/../.."
FWC=${FWC:-target/release/fwc}
REPEATS=${REPEATS:-5}
SIZES=("${@:-100000 1000000}")
if [ -z "${COMPILE_ONLY:-}" ]; then [ -x "$FWC" ] || cargo build --release -p fwc-runtime --bin fwc; fi
work=$(mktemp -d /tmp/fwc-bench-sets.XXXXXX)
ns="fwc-t-bench-sets-$$"
cleanup() { ip netns del "$ns" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

gen() { # N FILE: distinct IPv4 addresses (90%) and /24 networks (10%), FireHOL style
  python3 - "$1" "$2" <<'PY'
import random, sys
n, path = int(sys.argv[1]), sys.argv[2]
random.seed(14)
seen = set()
with open(path, "w") as f:
    f.write("# synthetic FireHOL-style list\n")
    while len(seen) < n:
        a = random.randrange(0x01000000, 0xDF000000)
        if random.random() < 0.1:
            key = ("n", a >> 8)
            if key in seen: continue
            seen.add(key); f.write("%d.%d.%d.0/24\n" % (a >> 24, (a >> 16) & 255, (a >> 8) & 255))
        else:
            if a in seen: continue
            seen.add(a); f.write("%d.%d.%d.%d\n" % (a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255))
PY
}
median() { sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.2f (%.2f-%.2f)", m, a[1], a[NR]}'; }
secs() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null 2>&1; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }

compile_only() { # N REPO: medians of REPEATS compiles per build, interleaved
  cargo build -q --release -p fwc-bench --bin fwc-bench-dir
  local builds=(after) b
  [ -n "${BEFORE:-}" ] && builds=(before after)
  for b in "${builds[@]}"; do : > "$work/$b.t"; : > "$work/$b.m"; done
  for i in $(seq "$REPEATS"); do
    for b in "${builds[@]}"; do
      local bin=target/release/fwc-bench-dir; [ "$b" = before ] && bin="$BEFORE/fwc-bench-dir"
      rm -rf "$work/out"
      "$bin" "$2" "$work/out" | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["seconds"], r["peak_rss_kib"]//1024)' > "$work/tm"
      read -r t m < "$work/tm"; echo "$t" >> "$work/$b.t"; echo "$m" >> "$work/$b.m"
    done
  done
  for b in "${builds[@]}"; do
    echo "N=$1 $b: compile $(median < "$work/$b.t") s, peak $(median < "$work/$b.m") MB"
  done
}

echo "machine: $(nproc) cores, $(uname -r), nft $(nft --version | awk '{print $2}'); load: $(uptime | sed 's/.*load/load/')"
for n in ${SIZES[@]}; do
  repo="$work/repo-$n"; mkdir -p "$repo/lists"
  gen "$n" "$repo/lists/big.netset"
  printf 'fwc 1\nset "big" file="lists/big.netset"\ninput {\n    deny "big" from="@big"\n}\n' > "$repo/fwc.kdl"
  if [ -n "${COMPILE_ONLY:-}" ]; then compile_only "$n" "$repo"; continue; fi
  : > "$work/c.t"; : > "$work/c.m"; : > "$work/bare"; : > "$work/fwc"
  for i in $(seq "$REPEATS"); do
    rm -rf "$work/out"
    /usr/bin/time -f "%e %M" -o "$work/tm" "$FWC" compile "$repo" --out "$work/out" >/dev/null
    read -r t m < "$work/tm"; echo "$t" >> "$work/c.t"; echo "$((m / 1024))" >> "$work/c.m"
    ip netns add "$ns"; secs ip netns exec "$ns" nft -j -f "$work/out/nftables.json" >> "$work/bare"; ip netns del "$ns"
    ip netns add "$ns"; rm -rf "$work/state"
    secs "$FWC" apply "$repo" --netns "$ns" --state-dir "$work/state" --auto-approve --no-sysctl >> "$work/fwc"
    ip netns exec "$ns" nft list sets inet > "$work/listed"
    grep -q elements "$work/listed" || { echo "fwc apply did not load the set" >&2; exit 1; }
    ip netns del "$ns"
  done
  b=$(sort -n "$work/bare" | awk '{a[NR]=$1} END {print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}')
  f=$(sort -n "$work/fwc" | awk '{a[NR]=$1} END {print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}')
  echo "N=$n: compile $(median < "$work/c.t") s, peak $(median < "$work/c.m") MB; bare nft -j -f $(median < "$work/bare") s; fwc apply (first) $(median < "$work/fwc") s; ratio $(echo "scale=2; $f / $b" | bc)x"
done
