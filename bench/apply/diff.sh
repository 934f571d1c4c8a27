#!/usr/bin/env bash
# The nftables diff transaction at scale (docs/performance.md "Apply by diff").
#
#   sudo bash bench/apply/diff.sh [SET_SIZE...]      (default: 100000 1000000)
#
# A host with FORWARDS (default 10,000) kernel forwards and one address set of SET_SIZE
# elements (a set file, one `deny` uses it), compiled once per variant with `fwc compile`:
#   base       the ruleset
#   fwd        base + one forward          (a one-forward change)
#   elem       base + one set element      (a one-element set change)
# Per repetition (REPEATS, default 5), side by side in a fresh network namespace each:
#   bare       `nft -j -f base/nftables.json` into an empty namespace
#   first      `fwc apply base` onto an empty namespace
#   +fwd, -fwd `fwc apply fwd`, then `fwc apply base` again
#   +elem, -elem  `fwc apply elem`, then `fwc apply base` again
# Each fwc apply reports its engine time (prepare + commit + verify, `--json` total_ms) and
# its wall time (the whole command: loading the artifacts, the plan with its live listing,
# the transaction, the state dir). Prints medians (min-max) and the batch of each step.
# Needs root, python3, bc and a release build (built when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
FWC=${FWC:-target/release/fwc}
REPEATS=${REPEATS:-5}
FORWARDS=${FORWARDS:-10000}
SIZES=("${@:-100000 1000000}")
[ -x "$FWC" ] || cargo build --release -p fwc-runtime --bin fwc
work=$(mktemp -d /tmp/fwc-bench-diff.XXXXXX)
ns="fwc-t-bench-diff-$$"
cleanup() { ip netns del "$ns" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

# gen DIR N FORWARDS EXTRA_FORWARD EXTRA_ELEMENT: a repository (set file of N distinct
# addresses 1.0.0.0 + 3i, so no two merge into one interval).
gen() {
  python3 - "$@" <<'PY'
import os, sys
d, n, fw, extra_fwd, extra_elem = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5] == "1"
os.makedirs(f"{d}/lists", exist_ok=True)
def addr(i):
    a = 0x01000000 + 3 * i
    return f"{a >> 24}.{(a >> 16) & 255}.{(a >> 8) & 255}.{a & 255}"
with open(f"{d}/lists/big.netset", "w") as f:
    f.write("\n".join(addr(i) for i in range(n)) + "\n")
    if extra_elem:
        f.write(addr(n) + "\n")
out = ['fwc 1', 'set "big" file="lists/big.netset"', 'input {', '    deny "big" from="@big"', '}']
out += [f'forward "f{i:05d}" listen=":{10000 + i}" to="198.18.2.2:6000"' for i in range(fw)]
if extra_fwd:
    out.append('forward "extra" listen=":40000" to="198.18.2.2:6000"')
open(f"{d}/fwc.kdl", "w").write("\n".join(out) + "\n")
PY
}
secs() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null 2>&1; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
median() { sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.3f (%.3f-%.3f)", m, a[1], a[NR]}'; }

# fwc_apply DIR STEP: apply, record "engine_s wall_s" under STEP and the batch's commands.
fwc_apply() {
  local t0 t1 out
  : > "$work/batch"
  t0=$(date +%s.%N)
  out=$(FWC_NFT_BATCH_LOG="$work/batch" "$FWC" apply "$1" --netns "$ns" --state-dir "$work/state" --auto-approve --no-sysctl --json 2>/dev/null)
  t1=$(date +%s.%N)
  echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["report"]["total_ms"] / 1000)' >> "$work/$2.engine"
  echo "$t1 - $t0" | bc >> "$work/$2.wall"
  python3 - "$work/batch" >> "$work/$2.batch" <<'PY'
import json, sys, collections
c = collections.Counter()
for line in open(sys.argv[1]):
    for cmd in json.loads(line)["nftables"]:
        (op, inner), = cmd.items(); c[f"{op} {next(iter(inner))}"] += 1
print(", ".join(f"{k} x{v}" for k, v in sorted(c.items())))
PY
}

echo "machine: $(nproc) cores, $(uname -r), nft $(nft --version | awk '{print $2}'); load: $(uptime | sed 's/.*load/load/')"
for n in ${SIZES[@]}; do
  for v in base fwd elem; do
    gen "$work/repo-$v" "$n" "$FORWARDS" "$([ $v = fwd ] && echo 1 || echo 0)" "$([ $v = elem ] && echo 1 || echo 0)"
    /usr/bin/time -f "%e" -o "$work/compile-$v" "$FWC" compile "$work/repo-$v" --out "$work/art-$v" >/dev/null
  done
  rm -f "$work"/*.engine "$work"/*.wall "$work"/*.batch "$work/bare"
  for i in $(seq "$REPEATS"); do
    ip netns add "$ns"; secs ip netns exec "$ns" nft -j -f "$work/art-base/nftables.json" >> "$work/bare"; ip netns del "$ns"
    ip netns add "$ns"; rm -rf "$work/state"
    fwc_apply "$work/art-base" first
    fwc_apply "$work/art-fwd" plus-fwd
    fwc_apply "$work/art-base" minus-fwd
    fwc_apply "$work/art-elem" plus-elem
    fwc_apply "$work/art-base" minus-elem
    ip netns exec "$ns" nft list sets inet > "$work/listed"   # (no grep -q in a pipe: SIGPIPE under pipefail)
    grep -q elements "$work/listed" || { echo "the set was not loaded" >&2; exit 1; }
    ip netns del "$ns"
  done
  bare=$(sort -n "$work/bare" | awk '{a[NR]=$1} END {print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}')
  echo
  echo "== $FORWARDS forwards, set of $n elements; compile (once): $(cat "$work/compile-base") s; $REPEATS repetitions, medians (min-max) in seconds"
  echo "| step | engine (prepare+commit+verify) | wall (whole fwc apply) | wall / bare | batch |"
  echo "|---|---|---|---|---|"
  echo "| bare nft -j -f | | $(median < "$work/bare") | 1.0 | the whole table |"
  for s in first plus-fwd minus-fwd plus-elem minus-elem; do
    w=$(sort -n "$work/$s.wall" | awk '{a[NR]=$1} END {print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}')
    echo "| $s | $(median < "$work/$s.engine") | $(median < "$work/$s.wall") | $(echo "scale=2; $w / $bare" | bc)x | $(sort "$work/$s.batch" | uniq -c | sort -rn | head -1 | sed 's/^ *[0-9]* //') |"
  done
done
