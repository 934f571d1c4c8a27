#!/usr/bin/env bash
# One element changed in a million-entry set file, end to end (docs/performance.md, "Sets"):
# `fwc apply REPO` of +1 / -1 element, of a version of the list never applied before (one
# /32 inserted mid-file, new each repetition: the set-file cache patches it from the version
# before it), the agent's reconcile of the same commits
# (`fwc agent --once` from a file:// remote), and one element deleted behind fwc's back found
# by `fwc plan` and by the agent's drift check (`agent --once`: with --drift alert, found and
# named, row agent-find; then with --drift heal, which also puts it back, row agent-drift).
# Builds side by side, alternating run by run, each in its own scratch namespaces
# (fwc-t-*) and state dirs.
#
#   sudo REPEATS=3 bash bench/sets/delta.sh [N] BUILD...      (N default 993000)
#
# DRIFT=0 leaves out the drift rows (each lists every element of the set from the kernel).
# STEPS=agent times only the agent's reconcile rows (agent-plus, agent-minus); STEPS=apply only
# the `fwc apply` rows (plus, minus, changed); the default, all of them (the drift rows, when
# DRIFT=1, run whole either way).
# bench/sets/cold.sh as a BUILD: the same fwc with its set-file cache emptied before each step.
#
# Run it through ../shared/quiet. Medians (min-max), seconds of wall time per step.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPEATS=${REPEATS:-3}
DRIFT=${DRIFT:-1}
STEPS=${STEPS:-all}
case "$STEPS" in all|agent|apply) ;; *) echo "STEPS=$STEPS: all, agent or apply" >&2; exit 2;; esac
N=${1:-993000}; shift || true
[ $# -gt 0 ] || set -- target/release/fwc
work=$(mktemp -d /tmp/fwc-bench-delta.XXXXXX)
nss=()
cleanup() { for n in "${nss[@]}"; do ip netns del "$n" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
median() { sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.3f (%.3f-%.3f)", m, a[1], a[NR]}'; }
timed() { # FILE CMD...: wall seconds of CMD appended to FILE; CMD's output in $work/out
  local f=$1 t0 t1; shift
  t0=$(date +%s.%N); "$@" > "$work/out" 2>&1 || true; t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc >> "$f"
}

# The list of bench/sets/issue27.sh (FireHOL style, seed 27); MODE base | plus (one /32 more).
repo() {
  python3 - "$N" "$1" "$2" <<'PY'
import os, random, sys
n, d, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
random.seed(27)
os.makedirs(f"{d}/lists", exist_ok=True)
seen, lines = set(), []
while len(lines) < n:
    a = random.randrange(0x01000000, 0xDF000000)
    if a >> 17 == 0xC612 >> 1:
        continue
    if random.random() < 0.1:
        if ("n", a >> 8) in seen: continue
        seen.add(("n", a >> 8)); lines.append("%d.%d.%d.0/24" % (a >> 24, (a >> 16) & 255, (a >> 8) & 255))
    else:
        if a in seen: continue
        seen.add(a); lines.append("%d.%d.%d.%d" % (a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255))
if mode == "plus":
    lines.append("198.51.100.7")
open(f"{d}/lists/big.netset", "w").write("\n".join(lines) + "\n")
open(f"{d}/fwc.kdl", "w").write('fwc 1\nset "big" file="lists/big.netset"\nset "banned" dynamic=#true timeout="1h"\n'
    'input {\n    deny "big" from="@big"\n    deny "banned" from="@banned"\n}\n')
PY
}
repo "$work/repo-base" base; repo "$work/repo-plus" plus
# The remote the agents follow.
git init -q -b main "$work/up"
git -C "$work/up" config user.email bench@fwc.invalid; git -C "$work/up" config user.name bench
publish() { # REPO_DIR MESSAGE
  cp -r "$1/." "$work/up/"; git -C "$work/up" add -A; git -C "$work/up" commit -q --allow-empty -m "$2"
}
publish "$work/repo-base" base
victim=$(grep -v / "$work/repo-base/lists/big.netset" | sed -n 1000p)
# The kernel set holding ADDR in namespace NS: big_v4_32, or its shard big_v4_32_s<i> once the
# set is split (compiler/src/place/setlayout.rs); nothing when no set holds it.
holder() { # NS ADDR
  local s
  for s in $(ip netns exec "$1" nft -t list sets inet | awk '$1 == "set" && $2 ~ /^big_v4_32/ {print $2}'); do
    ip netns exec "$1" nft get element inet fwc "$s" "{ $2 }" >/dev/null 2>&1 && { echo "$s"; return; }
  done
}

k=0
for b in "$@"; do
  k=$((k + 1))
  ns="fwc-t-bd$k-$$"; ag="fwc-t-bda$k-$$"; nss+=("$ns" "$ag")
  ip netns add "$ns"; ip netns add "$ag"
  "$b" apply "$work/repo-base" --netns "$ns" --state-dir "$work/state$k" --auto-approve --no-sysctl >/dev/null
  "$b" agent --once --repo "file://$work/up" --host localhost --branch main --netns "$ag" \
    --state-dir "$work/agent$k" --metrics off --no-forwarder --drift heal >/dev/null 2>&1
done
agent() { # BUILD NS STATE [DRIFT-MODE]
  "$1" agent --once --repo "file://$work/up" --host localhost --branch main --netns "$2" \
  --state-dir "$3" --metrics off --no-forwarder --drift "${4:-heal}"; }

echo "machine: $(nproc) cores, $(uname -r), nft $(nft --version | awk '{print $2}'); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$REPEATS"); do
  k=0
  [ "$STEPS" = agent ] || for b in "$@"; do
    k=$((k + 1)); ns="fwc-t-bd$k-$$"; st="$work/state$k"
    timed "$work/$k.plus" "$b" apply "$work/repo-plus" --netns "$ns" --state-dir "$st" --auto-approve --no-sysctl
    grep -q "198.51.100.7" "$work/out" || { echo "build $k: +1 did not name the element"; cat "$work/out"; exit 1; } >&2
    timed "$work/$k.minus" "$b" apply "$work/repo-base" --netns "$ns" --state-dir "$st" --auto-approve --no-sysctl
    rm -rf "$work/repo-new"; cp -r "$work/repo-base" "$work/repo-new"
    sed -i "$((N / 2))a 198.51.100.$((100 + i))" "$work/repo-new/lists/big.netset"
    timed "$work/$k.changed" "$b" apply "$work/repo-new" --netns "$ns" --state-dir "$st" --auto-approve --no-sysctl
    grep -q "198.51.100.$((100 + i))" "$work/out" || { echo "build $k: the new version did not name its element"; cat "$work/out"; exit 1; } >&2
    "$b" apply "$work/repo-base" --netns "$ns" --state-dir "$st" --auto-approve --no-sysctl > /dev/null
  done
  [ "$STEPS" != apply ] || continue
  publish "$work/repo-plus" "plus $i"
  k=0
  for b in "$@"; do
    k=$((k + 1)); timed "$work/$k.agent-plus" agent "$b" "fwc-t-bda$k-$$" "$work/agent$k"
    [ -n "$(holder "fwc-t-bda$k-$$" 198.51.100.7)" ] || { echo "build $k: the agent did not apply +1"; cat "$work/out"; exit 1; } >&2
  done
  publish "$work/repo-base" "base $i"
  k=0; for b in "$@"; do k=$((k + 1)); timed "$work/$k.agent-minus" agent "$b" "fwc-t-bda$k-$$" "$work/agent$k"; done
done
# The drift rows last: an element put back behind fwc's back makes the next apply list the
# table whole once (its stamp no longer matches), which would land in the ±1 rows.
for i in $(seq "$((DRIFT ? REPEATS : 0))"); do
  k=0
  for b in "$@"; do
    k=$((k + 1)); ns="fwc-t-bd$k-$$"; st="$work/state$k"
    set_=$(holder "$ns" "$victim")
    ip netns exec "$ns" nft delete element inet fwc "$set_" "{ $victim }"
    timed "$work/$k.drift" "$b" plan "$work/repo-base" --netns "$ns" --state-dir "$st"
    grep -q "$victim" "$work/out" || { echo "build $k: the plan did not name $victim"; cat "$work/out"; exit 1; } >&2
    ip netns exec "$ns" nft add element inet fwc "$set_" "{ $victim }"
  done
  k=0
  for b in "$@"; do
    k=$((k + 1)); ag="fwc-t-bda$k-$$"
    set_=$(holder "$ag" "$victim")
    ip netns exec "$ag" nft delete element inet fwc "$set_" "{ $victim }"
    # The drift check alone (`--drift alert`: found and named, not repaired), then the heal.
    timed "$work/$k.agent-find" agent "$b" "$ag" "$work/agent$k" alert
    grep -q "elements removed: $victim" "$work/out" || { echo "build $k: the agent's drift check (alert) did not name $victim"; cat "$work/out"; exit 1; } >&2
    timed "$work/$k.agent-drift" agent "$b" "$ag" "$work/agent$k"
    grep -q "elements removed: $victim" "$work/out" || { echo "build $k: the agent's drift check did not name $victim"; cat "$work/out"; exit 1; } >&2
    [ "$(holder "$ag" "$victim")" = "$set_" ] || { echo "build $k: the agent did not put $victim back"; cat "$work/out"; exit 1; } >&2
  done
done

echo
echo "== N=$N, one /32 ($victim deleted for the drift rows); $REPEATS repetitions, medians (min-max), seconds; load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| step | $(printf '%s | ' "$@")"
echo "|---|$(printf -- '---|%.0s' "$@")"
steps="plus minus changed agent-plus agent-minus"
[ "$DRIFT" = 0 ] || steps="plus minus changed drift agent-plus agent-minus agent-find agent-drift"
[ "$STEPS" != agent ] || steps=$(echo "$steps" | tr ' ' '\n' | grep '^agent' | tr '\n' ' ')
[ "$STEPS" != apply ] || steps=$(echo "$steps" | tr ' ' '\n' | grep -v '^agent' | tr '\n' ' ')
for s in $steps; do
  row="| $s |"; k=0
  for b in "$@"; do k=$((k + 1)); row="$row $(median < "$work/$k.$s") |"; done
  echo "$row"
done
